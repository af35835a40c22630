"""MkDocs hook: the images a page takes from the repository join the site.

A page shows a plot where the benchmark that draws it writes it (``../examples/compare/...``,
``../benchmarks/quality/results/...``), so the site shows what the last run left and the same link works
when the page is read on its own. MkDocs knows only the files under docs/; this adds each image such a link
names, under ``repository/`` in the site. A link to an image that does not exist is left alone, so that
``mkdocs build --strict`` reports it.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File, Files, InclusionLevel

IMAGE_OUTSIDE_DOCS = re.compile(r"\]\((\.\./[^)\s]+\.(?:png|svg|jpg))\)")


def on_files(files: Files, config) -> Files:  # noqa: ANN001 (MkDocs' config object)
    docs = Path(config["docs_dir"])
    for page in sorted(docs.rglob("*.md")):
        folder = posixpath.dirname(page.relative_to(docs).as_posix())
        for link in IMAGE_OUTSIDE_DOCS.findall(page.read_text(encoding="utf-8")):
            uri = posixpath.normpath(posixpath.join(folder, link))
            if files.get_file_from_path(uri) is None and (docs / uri).is_file():
                files.append(File(uri, str(docs), config["site_dir"], config["use_directory_urls"],
                                  dest_uri="repository/" + uri.replace("../", ""), inclusion=InclusionLevel.INCLUDED))
    return files
