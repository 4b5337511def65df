"""The what-if dashboard (Streamlit, multipage): ``kvplan dashboard`` runs ``app.py``."""
