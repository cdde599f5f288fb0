"""Training a model of the family on a text corpus: `python -m gptviz train`."""
