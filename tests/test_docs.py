"""The documentation: every example runs, and the API reference covers the whole public surface.

Every ```python block of ``README.md`` and of ``docs/**/*.md`` runs, in a fresh namespace, in a
scratch directory. A block whose first line is ``# needs: NAME[, NAME...]`` runs only where each
NAME is available: an extra of ``pyproject.toml`` (installed, by the rule of ``tests/_optional.py``),
a test server named in ``SERVERS`` (its address is exported to the block as ``ROLLMEM_<NAME>``, e.g.
``ROLLMEM_REDIS``; ``redis`` and ``postgres`` are extras too), or else an importable module (a
feature of a newer version of a package). Without a server the block skips, unless
``ROLLMEM_REQUIRE_SERVICES=1``.

The reference checks read the source with ``ast`` (no optional package is imported) and, where
mkdocs is installed (the ``docs`` extra), build the site and read its object inventory.
"""

from __future__ import annotations

import ast
import gc
import importlib
import importlib.util
import os
import re
import subprocess
import sys
import warnings
import zlib
from pathlib import Path
from typing import Any

import pytest

from _optional import declared, has, missing, skip_unless

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = DOCS / "pages"
REFERENCE = [PAGES / "reference.md", *sorted((PAGES / "reference").glob("*.md"))]
PACKAGE = ROOT / "src" / "rollmem"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
DIRECTIVE = re.compile(r"^::: *([\w.]+) *$", re.MULTILINE)
# server name in "# needs:" -> (the variable the test run is given, the one exported to the block)
SERVERS = {
    "redis": ("ROLLMEM_TEST_REDIS_URL", "ROLLMEM_REDIS"),
    "postgres": ("ROLLMEM_TEST_POSTGRES_DSN", "ROLLMEM_POSTGRES"),
    "redis_cluster": ("ROLLMEM_TEST_REDIS_CLUSTER_URL", "ROLLMEM_REDIS_CLUSTER"),
    "pgbouncer": ("ROLLMEM_TEST_PGBOUNCER_DSN", "ROLLMEM_PGBOUNCER"),
}


def _documents() -> list[Path]:
    return [ROOT / "README.md", *sorted(PAGES.rglob("*.md"))]


def _blocks() -> list[tuple[str, str]]:
    blocks = []
    for path in _documents():
        text = path.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            blocks.append((f"{path.relative_to(ROOT).as_posix()}:{line}", match.group(1)))
    return blocks


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a dotted name whose parent package is missing raises
        return False


def _missing(code: str) -> str | None:
    first = code.splitlines()[0] if code else ""
    if not first.startswith("# needs:"):
        return None
    for need in first.split(":", 1)[1].split(","):
        need = need.strip()
        if need in declared() and not has(need):
            return missing(need)
        if need in SERVERS:
            variable = SERVERS[need][0]
            if not os.environ.get(variable):
                if os.environ.get("ROLLMEM_REQUIRE_SERVICES") == "1":
                    pytest.fail(f"{variable} is not set but ROLLMEM_REQUIRE_SERVICES=1")
                return f"no {need} server ({variable} is not set)"
        elif need not in declared() and not _importable(need):
            return f"{need} is not installed"
    return None


def test_needs_of_a_missing_dotted_module_skips() -> None:
    assert _missing("# needs: rollmem_no_such_package.sub\nprint()") == (
        "rollmem_no_such_package.sub is not installed"
    )
    assert _missing("# needs: json.decoder\nprint()") is None
    assert _missing("# needs: dev\nprint()") is None  # an extra, installed
    assert _missing("print()") is None


def test_every_python_example_is_a_python_block() -> None:
    """A block tagged ``py``, ``python3`` or ``pycon`` would silently escape the run above."""
    for path in _documents():
        text = path.read_text(encoding="utf-8")
        tags = re.findall(r"^```(py|python3|pycon|ipython)\s*$", text, re.MULTILINE)
        assert not tags, f"{path.relative_to(ROOT)}: tag Python examples ```python so they run ({tags})"


def test_docs_have_examples() -> None:
    names = {where.split(":")[0] for where, _ in _blocks()}
    assert "README.md" in names
    assert len(_blocks()) >= 25


@pytest.mark.parametrize(("where", "code"), _blocks(), ids=[where for where, _ in _blocks()])
def test_python_block_runs(where: str, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reason = _missing(code)
    if reason:
        pytest.skip(reason)
    monkeypatch.chdir(tmp_path)
    for given, exported in SERVERS.values():
        monkeypatch.setenv(exported, os.environ.get(given, ""))
    if "# needs: google.adk" not in code:
        exec(compile(code, where, "exec"), {"__name__": "__docs__"})
        return
    # google-adk's SqliteSessionService checks its schema inside `with sqlite3.connect(...)`, which
    # never closes (Python 3.13 warns at collection): collect its connections here, not in a later test.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "unclosed database", ResourceWarning)
        exec(compile(code, where, "exec"), {"__name__": "__docs__"})
        gc.collect()


# -- the API reference ---------------------------------------------------------------------------


def _public_modules() -> dict[str, list[str]]:
    """Every public module of the package (no part starts with ``_``) and its ``__all__``, from source."""
    modules: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if any(part.startswith("_") for part in parts):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names: list[str] = []
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
            ):
                names = list(ast.literal_eval(node.value))
        modules[".".join(parts)] = names
    return modules


def test_every_public_module_is_in_the_reference() -> None:
    listed = [name for page in REFERENCE for name in DIRECTIVE.findall(page.read_text(encoding="utf-8"))]
    missing = sorted(set(_public_modules()) - set(listed))
    assert not missing, (
        f"add a '::: NAME' line to docs/pages/reference.md or reference/*.md for each of {missing}"
    )
    assert len(listed) == len(set(listed))


def _inventory(site: Path) -> set[str]:
    """The object names in a built site's ``objects.inv`` (Sphinx inventory version 2)."""
    data = (site / "objects.inv").read_bytes()
    header = data.split(b"\n", 4)
    assert header[0] == b"# Sphinx inventory version 2"
    body = zlib.decompress(header[4]).decode("utf-8")
    return {line.split(" ", 1)[0] for line in body.splitlines() if line.strip()}


def _unrendered(inventory: set[str]) -> list[str]:
    missing = []
    for module, names in _public_modules().items():
        for name in names:
            # A name a package loads lazily is documented where it is defined, in a submodule.
            defined_below = any(
                entry.startswith(module + ".") and entry.endswith("." + name) for entry in inventory
            )
            if f"{module}.{name}" not in inventory and not defined_below:
                missing.append(f"{module}.{name}")
    return missing


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built documentation site: ``ROLLMEM_DOCS_SITE`` when set (``.ci/run`` builds it once),
    else built here with ``mkdocs build --strict``."""
    given = os.environ.get("ROLLMEM_DOCS_SITE")
    if given:
        return Path(given)
    skip_unless("docs")
    built = tmp_path_factory.mktemp("docs") / "site"
    command = ["mkdocs", "build", "--strict", "-f", str(DOCS / "mkdocs.yml"), "-d", str(built)]
    build = subprocess.run(
        [sys.executable, "-m", *command],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert build.returncode == 0, build.stdout + build.stderr
    return built


def test_built_reference_documents_every_public_name(site: Path) -> None:
    missing = _unrendered(_inventory(site))
    assert not missing, f"public names absent from the API reference: {missing}"


def _documented_classes(inventory: set[str]) -> list[tuple[str, type]]:
    """``(documented path, class)`` for every public class of every public module that imports
    here (an integration whose framework is missing is checked where it is installed)."""
    found: dict[str, tuple[str, type]] = {}
    for module_name, names in _public_modules().items():
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        for name in names:
            value = getattr(module, name, None)
            if not isinstance(value, type) or not value.__module__.startswith("rollmem"):
                continue
            path = f"{module_name}.{name}"
            if path not in inventory:  # documented where it is defined (a lazily loaded name)
                path = next((e for e in sorted(inventory) if e.endswith("." + name)), path)
            found.setdefault(path, (path, value))
    return list(found.values())


def _public_members(cls: type) -> list[str]:
    """The public members ``cls`` offers that rollmem defines, inherited ones included (members a
    class takes from the standard library or a framework are documented there)."""
    members = []
    for name in dir(cls):
        if name.startswith("_"):
            continue
        owner = next((base for base in cls.__mro__ if name in vars(base)), None)
        if owner is not None and owner.__module__.startswith("rollmem"):
            members.append(name)
    return members


def test_built_reference_shows_every_member_of_every_public_class(site: Path) -> None:
    """A newcomer finds every method of the class they use, inherited ones included."""
    inventory = _inventory(site)
    classes = _documented_classes(inventory)
    assert {"rollmem.RollingMemory", "rollmem.AsyncRollingMemory", "rollmem.sessions.Sessions"} <= {
        path for path, _ in classes
    }
    missing = [
        f"{path}.{member}"
        for path, cls in classes
        for member in _public_members(cls)
        if f"{path}.{member}" not in inventory
    ]
    assert not missing, f"public members absent from the API reference: {missing}"
    rolling = dict(classes)["rollmem.RollingMemory"]
    for member in ("add_user_message", "get_messages", "get_context", "to_dict", "stats", "pin", "fold"):
        assert member in _public_members(rolling)


# -- the site in a real browser ------------------------------------------------------------------

#: Pages checked in the browser: the home page, a guide and the reference, with what each must show.
SITE_PAGES = {"": "rollmem", "controls/": "Controls", "reference/": "Core"}
#: The only other host a page may ask (Material's repository facts in the header); offline it fails.
FOREIGN_ALLOWED = ("https://api.github.com/",)


def _browser() -> str:
    """The Chromium to drive (``ROLLMEM_CHROMIUM`` or one on ``PATH``); skips without one and
    without playwright, unless ``ROLLMEM_REQUIRE_BROWSER=1``."""
    import shutil

    required = os.environ.get("ROLLMEM_REQUIRE_BROWSER") == "1"
    path = os.environ.get("ROLLMEM_CHROMIUM") or next(
        filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None
    )
    reason = missing("docs")
    if path is None:
        reason = reason or "no Chromium here (apt-get install chromium)"
    if reason is not None:
        if required:
            pytest.fail(reason)
        pytest.skip(reason)
    assert path is not None
    return path


@pytest.fixture(scope="module")
def served(site: Path) -> Any:
    """The built site on an HTTP server on loopback; yields its base URL."""
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.parametrize("page", list(SITE_PAGES))
def test_site_page_renders_in_a_browser(served: str, page: str, tmp_path: Path) -> None:
    """Each page loads every asset it asks for, is styled, highlights and offers to copy its code,
    and renders to a screenshot (kept in ``ROLLMEM_DOCS_SCREENSHOTS`` when set)."""
    chromium = _browser()
    from playwright.sync_api import sync_playwright

    broken: list[str] = []
    flags = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=flags)
        try:
            view = browser.new_page(viewport={"width": 1280, "height": 900})
            view.on("response", lambda r: r.status >= 400 and broken.append(f"{r.status} {r.url}"))
            view.on(
                "requestfailed",
                lambda r: r.url.startswith(FOREIGN_ALLOWED) or broken.append(f"failed {r.url}"),
            )
            view.goto(served + page, wait_until="networkidle")
            assert SITE_PAGES[page] in view.title()
            styled = view.evaluate("getComputedStyle(document.querySelector('.md-header')).position")
            highlighted = view.evaluate(
                "(() => { const token = document.querySelector('.highlight code span[class]');"
                " const text = document.querySelector('.md-typeset');"
                " return token && text ? getComputedStyle(token).color !== getComputedStyle(text).color"
                " : null })()"
            )
            copy_buttons = view.evaluate("document.querySelectorAll('[data-md-type=copy]').length")
            shots = Path(os.environ.get("ROLLMEM_DOCS_SCREENSHOTS") or tmp_path)
            shots.mkdir(parents=True, exist_ok=True)
            shot = shots / f"{page.strip('/') or 'home'}.png"
            view.screenshot(path=str(shot))
        finally:
            browser.close()
    assert not broken, f"{page or 'home'}: assets that failed to load: {broken}"
    assert styled in ("sticky", "fixed"), "the theme's stylesheet is not applied"
    assert highlighted is True, "code blocks are not highlighted"
    assert copy_buttons > 0, "code blocks have no copy button"
    assert shot.stat().st_size > 20_000  # a page with content, not a blank one


# -- the README as the package index shows it ----------------------------------------------------

HREF = re.compile(r"""(?:href|src)="([^"]*)\"""")


def _config_url(key: str) -> str:
    match = re.search(rf"^{key}: *(\S+)", (DOCS / "mkdocs.yml").read_text(encoding="utf-8"), re.MULTILINE)
    assert match is not None, f"docs/mkdocs.yml sets no {key}"
    return match.group(1).rstrip("/") + "/"


def _page_of(url: str, site: str) -> Path:
    """The page source behind a link into the docs site (``SITE/controls/`` is ``controls.md``)."""
    page = url[len(site) :].split("#", 1)[0].rstrip("/")
    candidates = [PAGES / f"{page}.md", PAGES / page / "index.md"] if page else [PAGES / "index.md"]
    return next((path for path in candidates if path.is_file()), candidates[0])


def test_readme_links_work_on_the_package_index() -> None:
    """The long description, rendered as the package index renders it, links only to absolute
    URLs: pages of the docs site and files of the repository that exist."""
    from readme_renderer import markdown  # the dev extra

    html = markdown.render((ROOT / "README.md").read_text(encoding="utf-8"))
    assert html is not None
    site, repo = _config_url("site_url"), _config_url("repo_url")
    links = HREF.findall(html)
    assert len(links) >= 20
    broken = []
    for link in links:
        if link.startswith(site):
            if not _page_of(link, site).is_file():
                broken.append(link)
        elif link.startswith(repo + "blob/main/"):
            if not (ROOT / link[len(repo + "blob/main/") :].split("#", 1)[0]).exists():
                broken.append(link)
        elif not link.startswith(("https://", "#")):
            broken.append(link)  # relative: broken on the package index
    assert not broken, f"README links that do not work on the package index: {broken}"


def test_project_urls_point_where_the_docs_config_says() -> None:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    urls = dict(re.findall(r'^(\w+) = "(https://[^"]+)"$', text.split("[project.urls]", 1)[1], re.MULTILINE))
    site, repo = _config_url("site_url"), _config_url("repo_url")
    assert urls["Documentation"] == site
    assert urls["Source"] == repo.rstrip("/")
    assert urls["Changelog"] == site + "changelog/"
    assert urls["Issues"] == repo + "issues"
