"""gptviz dashboard: `streamlit run app.py`. A router: the shared sidebar, then the chosen page.

The pages live in views/, not pages/: a folder named pages/ beside app.py switches Streamlit to its
old automatic multipage mode, which then runs a page script without this router (no sidebar).

The sidebar (gptviz.ui) loads the checkpoint once per process and runs a prompt once per
(checkpoint, device, prompt); every page reads that one Trace through ui.view().
"""

import streamlit as st

from gptviz import ui

st.set_page_config(page_title="gptviz", page_icon="🔍", layout="wide")

PAGES = [
    st.Page("views/overview.py", title="Overview", icon="🏠", default=True),
    st.Page("views/attention.py", title="Attention", icon="👀"),
    st.Page("views/qkv.py", title="Q / K / V", icon="🧮", url_path="qkv"),
    st.Page("views/shapes.py", title="Shapes", icon="📐"),
    st.Page("views/residual.py", title="Residual stream", icon="🌊", url_path="residual"),
    st.Page("views/next_token.py", title="Next token", icon="🎯", url_path="next-token"),
]


def main() -> None:
    page = st.navigation(PAGES)
    ui.sidebar()
    page.run()


ui.guard(main)
