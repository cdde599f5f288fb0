"""Real-browser tests: Streamlit served on 127.0.0.1, driven through Debian's Chromium."""
