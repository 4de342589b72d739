"""Write a file under a temporary name next to its target and rename it into place at the end."""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def atomic_output(out: Path) -> Iterator[Path]:
    """Yield a temporary path beside `out`; on success it becomes `out`, on any failure it is removed.

    The final file gets ordinary permissions (0666 minus the umask), not mkstemp's 0600.
    """
    out = Path(out)
    fd, name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".part", dir=out.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
