"""Dashboard pages: each file is one Streamlit page script (run by app.py, not imported)."""
