"""kvplan's command line (``kvplan = cli.main:main``): the top layer, the only package that
imports the simulator, the runtime, calibration, analysis and the dashboards together."""
