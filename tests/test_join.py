"""Joining a class: the follow link names an address the room can reach (not the 127.0.0.1 a teacher
on the server's own machine browses), and its QR code, drawn by segno on the server, is that link.

No QR decoder is installed (zbar, OpenCV), so the PNG the page shows is read back module by module
with Pillow and compared with segno's own encoding of the expected link: the picture is that code."""

from __future__ import annotations

import io
import ipaddress

import pytest
import segno
from PIL import Image

from gptviz.dashboard.classroom import join

LAN = "192.168.1.20"


@pytest.mark.parametrize(
    "browser,bound,lan,base,want",
    [
        # the teacher browses the server's own machine: the room gets its network address
        ("http://127.0.0.1:8501/lesson", "", LAN, "", f"http://{LAN}:8501/?follow=K7QX"),
        ("http://localhost:8501", "0.0.0.0", LAN, "", f"http://{LAN}:8501/?follow=K7QX"),
        ("http://[::1]:8501/", "::", LAN, "", f"http://{LAN}:8501/?follow=K7QX"),
        # the server listens on one address: that one
        ("http://127.0.0.1:8600/lesson", "10.1.2.3", LAN, "", "http://10.1.2.3:8600/?follow=K7QX"),
        # the teacher used an address or a name the room can reach: kept, with its scheme and base path
        ("https://192.168.1.77:8501/lesson", "", LAN, "", "https://192.168.1.77:8501/?follow=K7QX"),
        (
            "http://teacher-laptop.local:8501/x",
            "",
            LAN,
            "/gptviz/",
            "http://teacher-laptop.local:8501/gptviz/?follow=K7QX",
        ),
        # a Host header that is no host (a hostile proxy or client): never echoed into the link
        ('http://a"onmouseover=x:8501', "", LAN, "", f"http://{LAN}:8501/?follow=K7QX"),
        ("http://evil.example:notaport", "", LAN, "", "http://evil.example/?follow=K7QX"),
        # nothing better is known: the teacher's own (the join screen then says students cannot reach it)
        ("http://127.0.0.1:8501", "127.0.0.1", None, "", "http://127.0.0.1:8501/?follow=K7QX"),
        (
            "http://127.0.0.1:8501",
            "127.0.0.1",
            LAN,
            "",
            "http://127.0.0.1:8501/?follow=K7QX",
        ),  # listens on loopback only
        ("http://127.0.0.1:8501", "", None, "", "http://127.0.0.1:8501/?follow=K7QX"),
    ],
)
def test_the_follow_link_names_an_address_the_room_reaches(browser, bound, lan, base, want):
    assert join.follow_link(browser, bound, "K7QX", lan, base) == want


def test_this_machines_network_address_is_not_loopback():
    ip = join.lan_address()
    assert ip is None or not ipaddress.ip_address(ip).is_loopback


def read_qr(png: bytes, scale: int = join.QR_SCALE, border: int = join.QR_BORDER) -> list[list[bool]]:
    """The modules of a QR code picture: the colour at each module's centre (dark = True)."""
    img = Image.open(io.BytesIO(png)).convert("L")
    n = img.width // scale - 2 * border
    assert img.width == img.height == (n + 2 * border) * scale
    at = lambda r, c: img.getpixel(((border + c) * scale + scale // 2, (border + r) * scale + scale // 2))  # noqa: E731
    corner = [img.getpixel((x, y)) for x in range(border * scale) for y in range(border * scale)]
    assert min(corner) > 128, "a light quiet zone round the code"
    return [[at(r, c) < 128 for c in range(n)] for r in range(n)]


@pytest.mark.parametrize(
    "link", ["http://192.168.1.20:8501/?follow=K7QX", "https://teacher-laptop.local:8501/gptviz/?follow=ABCD"]
)
def test_the_qr_code_is_the_link(link):
    png = join.qr_png(link)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    want = segno.make(link, error="m", micro=False)
    assert read_qr(png) == [[bool(x) for x in row] for row in want.matrix]
    other = segno.make(link.replace("K7QX", "K7QY").replace("ABCD", "ABCE"), error="m", micro=False)
    assert read_qr(png) != [[bool(x) for x in row] for row in other.matrix]  # one letter changes the picture
