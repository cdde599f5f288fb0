"""The page icon, drawn here: a causal attention pattern (the lower triangle of a 6 × 6 grid).

A Material icon as page_icon makes every browser fetch it from fonts.gstatic.com, and a classroom
or an air-gapped lab has no internet; an image is served by the dashboard's own server."""

from __future__ import annotations

from functools import cache

from PIL import Image, ImageDraw

SIZE, CELLS = 64, 6
BLUE, PALE = (31, 111, 180, 255), (200, 200, 200, 255)  # figures.style's BLUE; MASKED's grey


@cache
def page_icon() -> Image.Image:
    """A 64 × 64 RGBA image: query i (row) reads key j (column) where j <= i, in blue; the masked
    future keys in grey. Made once per process."""
    img = Image.new("RGBA", (SIZE, SIZE), (0, 0, 0, 0))
    draw = ImageDraw.Draw(img)
    step = SIZE // CELLS
    for i in range(CELLS):
        for j in range(CELLS):
            x, y = j * step + 1, i * step + 1
            draw.rectangle([x, y, x + step - 3, y + step - 3], fill=BLUE if j <= i else PALE)
    return img
