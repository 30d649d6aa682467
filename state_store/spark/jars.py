"""Delta's jars in a folder of this machine, fetched once (``lakestate jars``), so that no ``spark-submit`` and no
session of an installed package resolves them through Ivy at start (a checkout has scripts/setup.sh's
``.cache/jars``).

The folder is ``$LAKESTATE_JARS_DIR``, else ``$XDG_CACHE_HOME/lakestate/jars`` (``~/.cache/lakestate/jars``), with
one sub-folder per Delta release: ``delta-4.0.0/``. Each jar is checked against the SHA-1 Maven Central publishes
beside it and written under a hidden name, then renamed: a folder holds complete jars or none.
"""
from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.request
from pathlib import Path

from ..errors import ConfigError
from ..progress import wing_logger

_SAY = wing_logger(__name__).info  # what it says it does, unless given a say of its own (``progress``)

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
DELTA_VERSION = "4.0.0"  # delta-spark in requirements.txt
DELTA_PACKAGE = f"io.delta:delta-spark_2.13:{DELTA_VERSION}"  # what Ivy resolves where no jar is found
# What DELTA_PACKAGE brings beyond what Spark ships (its antlr4 runtime is Spark's own): scripts/jars-pom.xml.
DELTA_ARTIFACTS = (("io.delta", "delta-spark_2.13", DELTA_VERSION), ("io.delta", "delta-storage", DELTA_VERSION))


def jars_dir() -> Path:
    """Where ``lakestate jars`` puts Delta's jars on this machine."""
    if os.environ.get("LAKESTATE_JARS_DIR"):
        return Path(os.environ["LAKESTATE_JARS_DIR"])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "lakestate" / "jars" / f"delta-{DELTA_VERSION}"


def fetched_jars() -> list[str]:
    """Delta's jars that ``lakestate jars`` fetched here, when all of them are there; else none."""
    paths = [jars_dir() / _file(artifact, version) for _, artifact, version in DELTA_ARTIFACTS]
    return [str(p) for p in paths] if all(p.is_file() for p in paths) else []


def fetch_jars(repository: str = MAVEN_CENTRAL, say=_SAY) -> list[str]:
    """Fetch Delta's jars from ``repository`` (a Maven repository's URL) into ``jars_dir()``, each checked against
    its published SHA-1; a jar already there is kept. Returns their paths."""
    folder = jars_dir()
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for group, artifact, version in DELTA_ARTIFACTS:
        path = folder / _file(artifact, version)
        if not path.is_file():
            url = f"{repository.rstrip('/')}/{group.replace('.', '/')}/{artifact}/{version}/{path.name}"
            data, sha1 = _get(url), _get(url + ".sha1").decode().split()[0].strip().lower()
            if hashlib.sha1(data).hexdigest() != sha1:  # Maven's published checksum, not security
                raise ConfigError(f"{url} does not match its published SHA-1 ({sha1}): fetched damaged; run "
                                  f"`lakestate jars` again")
            part = folder / f".{path.name}.part"
            part.write_bytes(data)
            part.rename(path)
            say(f"[lakestate] fetched {path.name} ({len(data)} bytes)")
        paths.append(str(path))
    return paths


def _file(artifact: str, version: str) -> str:
    return f"{artifact}-{version}.jar"


def _get(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:  # a Maven repository's URL
            return response.read()
    except (urllib.error.URLError, OSError) as e:
        raise ConfigError(f"cannot fetch {url}: {e}; check this machine reaches the repository (Maven Central "
                          f"by default; --repository names a mirror), or set LAKESTATE_JARS to the jars' paths "
                          f"(comma-separated)") from e
