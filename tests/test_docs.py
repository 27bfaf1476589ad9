"""The documentation: every example runs, and the API reference covers the whole public surface.

Every ```python block of ``README.md`` and of ``docs/**/*.md`` runs, in a fresh namespace, in a
scratch directory. A block whose first line is ``# needs: NAME[, NAME...]`` runs only where each
NAME is available: an extra of ``pyproject.toml`` (installed, by the rule of ``tests/_optional.py``),
a test server named in ``SERVERS`` (its address is exported to the block as ``ROLLMEM_<NAME>``, e.g.
``ROLLMEM_REDIS``; ``redis`` and ``postgres`` are extras too), or else an importable module (a
feature of a newer version of a package). Without a server the block skips, unless
``ROLLMEM_REQUIRE_SERVICES=1``. A block showing pytest tests (it defines ``test_``
functions, whose only fixture may be ``tmp_path``) has each of them run after it, as pytest would.
A block titled with a file name (```` ```python title="chatbot.py" ````) is that file of the
reader's project: before any later block of its page runs, it is written to the scratch
directory, which is on ``sys.path`` (so a tutorial's tests import its module). A block that only
includes a file (``--8<--``) shows a file its own tests run.

The reference checks read the source with ``ast`` (no optional package is imported) and, where
mkdocs is installed (the ``docs`` extra), build the site and read its object inventory.
"""

from __future__ import annotations

import ast
import contextlib
import gc
import html as html_module
import importlib
import importlib.util
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import warnings
import zlib
from pathlib import Path
from typing import Any, Iterator

import pytest

from _optional import declared, has, missing, not_here, skip_unless

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = DOCS / "pages"
REFERENCE = [PAGES / "reference.md", *sorted((PAGES / "reference").glob("*.md"))]
PACKAGE = ROOT / "src" / "rollmem"
BLOCK = re.compile(r'^```python(?: title="(?P<file>[^"]+)")?\n(?P<code>.*?)^```', re.MULTILINE | re.DOTALL)
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
    """``(page:line, code)`` of every example to run, in page order."""
    return [(where, code) for where, code, _ in _page_blocks()]


def _page_blocks() -> list[tuple[str, str, dict[str, str]]]:
    """``(page:line, code, files)``: each example, with the files (name -> code) the blocks
    titled with a file name before it on its page make."""
    blocks = []
    for path in _documents():
        text = path.read_text(encoding="utf-8")
        files: dict[str, str] = {}
        for match in BLOCK.finditer(text):
            if match["code"].startswith("--8<--"):
                continue
            line = text.count("\n", 0, match.start()) + 1
            blocks.append((f"{path.relative_to(ROOT).as_posix()}:{line}", match["code"], dict(files)))
            if match["file"]:
                files[match["file"]] = match["code"]
    return blocks


def test_a_file_block_is_written_for_the_blocks_after_it() -> None:
    made = [sorted(files) for where, _, files in _page_blocks() if where.startswith("docs/pages/tutorial")]
    assert made == [[], ["chatbot.py"], ["chatbot.py"]]  # chatbot.py, trying it, test_chatbot.py
    shown = [where for where, code, _ in _page_blocks() if "--8<--" in code.split("\n", 1)[0]]
    assert shown == []  # the reference implementation's page shows its file: not an example


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
        if need in declared() and not _importable(need) and not_here(need, need):
            return not_here(need, need)  # langchain: the extra has langchain on Python 3.10+ only
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


#: The widest code line an example may have: wider ones scroll sideways on the site.
CODE_COLUMNS = 88
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)(?P=fence)[ \t]*$",
    re.MULTILINE | re.DOTALL,
)


def _wide_lines(path: Path) -> list[str]:
    """``path:line: N columns`` for each code line of a fenced block wider than CODE_COLUMNS. A
    block marked ``{.LANG .wrap}`` (a JSON Lines record, a program's output) wraps on screen."""
    text = path.read_text(encoding="utf-8")
    wide = []
    for block in FENCE.finditer(text):
        if re.search(r"\.wrap\b", block["info"]):
            continue
        first = text.count("\n", 0, block.start("body")) + 1
        for number, line in enumerate(block["body"].splitlines(), first):
            if len(line) > CODE_COLUMNS:
                wide.append(f"{path.relative_to(ROOT).as_posix()}:{number}: {len(line)} columns")
    return wide


def test_examples_fit_88_columns() -> None:
    """No example scrolls sideways: every code line of a fenced block of the README and of the
    pages fits in 88 columns."""
    sample = "```python\n" + "x" * (CODE_COLUMNS + 1) + "\n```\n"
    assert [m["body"] for m in FENCE.finditer(sample)] == ["x" * (CODE_COLUMNS + 1) + "\n"], "FENCE"
    checked = _documents()
    assert PAGES / "cost.md" in checked
    wide = [line for path in checked for line in _wide_lines(path)]
    assert not wide, f"wrap these code lines to {CODE_COLUMNS} columns: {wide}"


def test_docs_have_examples() -> None:
    names = {where.split(":")[0] for where, _ in _blocks()}
    assert "README.md" in names
    assert len(_blocks()) >= 25


def _run_tests(namespace: dict[str, Any], scratch: Path) -> None:
    """Run each ``test_`` function a block defined, as pytest would: ``tmp_path`` is the one
    fixture given (a new folder for each test)."""
    for name, test in list(namespace.items()):
        if name.startswith("test_") and inspect.isfunction(test):
            wanted = list(inspect.signature(test).parameters)
            assert set(wanted) <= {"tmp_path"}, f"{name}: only the tmp_path fixture is given"
            folder = scratch / f"pytest-{name}"
            folder.mkdir()
            test(*([folder] if wanted else []))


@pytest.mark.parametrize(
    ("where", "code", "files"), _page_blocks(), ids=[where for where, _, _ in _page_blocks()]
)
def test_python_block_runs(
    where: str, code: str, files: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reason = _missing(code)
    if reason:
        pytest.skip(reason)
    monkeypatch.chdir(tmp_path)
    for given, exported in SERVERS.values():
        monkeypatch.setenv(exported, os.environ.get(given, ""))
    if files:  # the reader's files so far: importable, and forgotten after this test
        for name, text in files.items():
            (tmp_path / name).write_text(text, encoding="utf-8")
        monkeypatch.syspath_prepend(str(tmp_path))
        for module in [Path(name).stem for name in files]:
            monkeypatch.delitem(sys.modules, module, raising=False)
    if "# needs: google.adk" not in code:
        namespace: dict[str, Any] = {"__name__": "__docs__"}
        try:
            exec(compile(code, where, "exec"), namespace)
            _run_tests(namespace, tmp_path)
        finally:
            for module in [Path(name).stem for name in files]:
                sys.modules.pop(module, None)
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


def _inventory_roles(site: Path) -> dict[str, str]:
    """Each object name in a built site's ``objects.inv`` (Sphinx inventory version 2) -> its
    role (``py:class``, ``py:method``, ...)."""
    data = (site / "objects.inv").read_bytes()
    header = data.split(b"\n", 4)
    assert header[0] == b"# Sphinx inventory version 2"
    body = zlib.decompress(header[4]).decode("utf-8")
    return {line.split(" ")[0]: line.split(" ")[1] for line in body.splitlines() if line.strip()}


def _inventory(site: Path) -> set[str]:
    return set(_inventory_roles(site))


def _unrendered(inventory: set[str]) -> list[str]:
    """``module.name`` for each public name absent from the reference. A name a module
    re-exports is documented once, where it is defined (``docs/public_surface.py``): under a
    public module, or (lazily loaded) under a submodule of the one that exports it."""
    modules = _public_modules()
    missing = []
    for module, names in modules.items():
        for name in names:
            elsewhere = any(
                entry.endswith("." + name)
                and (entry[: -len(name) - 1] in modules or entry.startswith(module + "."))
                for entry in inventory
            )
            if f"{module}.{name}" not in inventory and not elsewhere:
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
    here (an integration whose framework is missing is checked where it is installed), documented
    where it is defined, or under the module that exports it when that one is private."""
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
            path = f"{value.__module__}.{value.__qualname__}"
            if path not in inventory:  # defined in a private module: documented where exported
                path = f"{module_name}.{name}"
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
    assert {
        "rollmem.memory.RollingMemory",
        "rollmem.memory.AsyncRollingMemory",
        "rollmem.sessions.Sessions",
    } <= {path for path, _ in classes}
    missing = [
        f"{path}.{member}"
        for path, cls in classes
        for member in _public_members(cls)
        if f"{path}.{member}" not in inventory
    ]
    assert not missing, f"public members absent from the API reference: {missing}"
    rolling = dict(classes)["rollmem.memory.RollingMemory"]
    for member in ("add_user_message", "get_messages", "get_context", "to_dict", "stats", "pin", "fold"):
        assert member in _public_members(rolling)


def _reference_html(site: Path) -> dict[str, str]:
    """The built reference pages: site-relative URL -> HTML."""
    pages = [site / "reference" / "index.html", *sorted((site / "reference").glob("*/index.html"))]
    return {
        page.parent.relative_to(site).as_posix() + "/": page.read_text(encoding="utf-8") for page in pages
    }


HEADING_ID = re.compile(r'<h[1-6] id="(rollmem[^"]*)" class="doc doc-heading">')
SIGNATURE = re.compile(r'<div class="doc-signature highlight"><pre>(.*?)</pre>', re.DOTALL)
PRIVATE_NAME = re.compile(r"(?<![\w.])_(?!_)\w+|(?<![\w.])__\w+(?<!__)\b")
STRING = re.compile(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'")


def _values(signature: str) -> list[str]:
    """The expressions after each ``=`` of a signature (parameter defaults, an attribute's
    value), each up to the next top-level comma or the closing bracket."""
    values = []
    signature = STRING.sub("''", signature)
    for match in re.finditer(r"(?<![=<>!:-])=(?!=)", signature):
        depth, end = 0, len(signature)
        for index in range(match.end(), len(signature)):
            char = signature[index]
            depth += char in "([{"
            if (char in ")]}" and depth == 0) or (char == "," and depth == 0):
                end = index
                break
            depth -= char in ")]}"
        values.append(signature[match.end() : end].strip())
    return values


def test_built_reference_shows_no_inherited_dunder(site: Path) -> None:
    """``__init_subclass__`` and the like are Python's machinery, not rollmem's API: the
    reference shows no dunder member but ``rollmem.__version__``."""
    shown = [
        anchor
        for html in _reference_html(site).values()
        for anchor in HEADING_ID.findall(html)
        if anchor.rsplit(".", 1)[-1].startswith("__") and anchor != "rollmem.__version__"
    ]
    assert not shown, f"dunder members in the API reference: {shown}"
    assert "rollmem.__version__" in _inventory(site)


def test_built_reference_shows_no_private_name_as_a_value(site: Path) -> None:
    """A default or an attribute's value never names a private object (``_PolicySetting(...)``):
    the reference shows what the reader gets (``max_tokens: int``, a property)."""
    assert _values("f(a: int = 2, b: Callable[[int], str] = _X(1, 2), c='=') -> None") == [
        "2",
        "_X(1, 2)",
        "''",
    ]
    assert PRIVATE_NAME.search("_X(1)")
    assert not PRIVATE_NAME.search("__version__ + a_b + m._x")
    found = []
    for url, html in _reference_html(site).items():
        for signature in SIGNATURE.findall(html):
            text = html_module.unescape(re.sub(r"<[^>]+>", "", signature))
            found += [
                f"{url}: {text.split(chr(10))[0]}" for value in _values(text) if PRIVATE_NAME.search(value)
            ]
    assert not found, f"private names shown as values: {found}"
    page = _reference_html(site)["reference/"]
    max_tokens = page.split('id="rollmem.memory.RollingMemory.max_tokens"', 1)[1].split("</pre>", 1)[0]
    assert "max_tokens: int" in html_module.unescape(re.sub(r"<[^>]+>", "", max_tokens))


def test_built_reference_search_names_the_class(site: Path) -> None:
    """Each search hit of a class member names its class (``RollingMemory.to_dict``), each object
    is documented once, and no two hits of the reference are the same."""
    roles = _inventory_roles(site)
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))["docs"]
    hits = {entry["location"].split("#", 1)[1]: entry for entry in index if "#rollmem" in entry["location"]}
    unnamed = []
    for anchor, entry in hits.items():
        owner, _, member = anchor.rpartition(".")
        if roles.get(owner) == "py:class" and not entry["title"].startswith(
            f"{owner.rsplit('.', 1)[-1]}.{member}"
        ):
            unnamed.append(f"{anchor}: {entry['title']!r}")
    assert not unnamed, f"search hits of class members that do not name their class: {unnamed}"
    to_dict = sorted(entry["title"] for entry in hits.values() if re.match(r"\w+\.to_dict\b", entry["title"]))
    assert {"RollingMemory.to_dict", "Message.to_dict", "ToolCall.to_dict", "MemoryStats.to_dict"} <= set(
        to_dict
    )
    assert len(to_dict) == len(set(to_dict)), f"one object documented twice: {to_dict}"
    seen: dict[tuple[str, str], str] = {}
    twins = [
        f"{seen[key]} and {anchor}"
        for anchor, entry in hits.items()
        if (key := (entry["title"], entry["text"])) in seen or seen.setdefault(key, anchor) != anchor
    ]
    assert not twins, f"identical search hits: {twins}"


# -- the site in a real browser ------------------------------------------------------------------

#: The pages the browser opens, each with a word its title shows. Each is checked for its assets,
#: styling, highlighted code with copy buttons, its edit button and the version selector. A new
#: page is one more line: its address in a version of the site and a word of its title.
SITE_PAGES = {
    "": "rollmem",
    "tutorial/": "Build a chatbot",
    "controls/": "Controls",
    "reference/": "Core",
}
#: The versions the browser sees, laid out as ``mike`` publishes them (development.md): a folder per
#: version (each holds the site under test), the alias ``latest`` beside its version, and at the
#: root ``versions.json``, an ``index.html`` that goes to ``latest/`` and ``docs/root-404.html``.
VERSIONS = [
    {"version": "dev", "title": "dev", "aliases": []},
    {"version": "0.7", "title": "0.7.0", "aliases": ["latest"]},
]
#: The only other host a page may ask (Material's repository facts in the header); offline it fails.
FOREIGN_ALLOWED = ("https://api.github.com/",)
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]


def _browser() -> str:
    """The Chromium to drive (``ROLLMEM_CHROMIUM`` or one on ``PATH``); skips without one and
    without playwright, unless ``ROLLMEM_REQUIRE_BROWSER=1``."""
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


@contextlib.contextmanager
def _page() -> Iterator[tuple[Any, list[str]]]:
    """A page of a headless Chromium, and the list of what failed to load on it."""
    chromium = _browser()
    from playwright.sync_api import sync_playwright

    broken: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        try:
            view = browser.new_page(viewport={"width": 1280, "height": 900})
            view.on("response", lambda r: r.status >= 400 and broken.append(f"{r.status} {r.url}"))
            view.on(
                "requestfailed",
                lambda r: r.url.startswith(FOREIGN_ALLOWED) or broken.append(f"failed {r.url}"),
            )
            yield view, broken
        finally:
            browser.close()


@pytest.fixture(scope="module")
def published(site: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built site in the versioned layout the docs workflows publish (see ``VERSIONS``)."""
    root = tmp_path_factory.mktemp("published")
    for entry in VERSIONS:
        (root / entry["version"]).symlink_to(site, target_is_directory=True)
        for alias in entry["aliases"]:
            (root / alias).symlink_to(entry["version"], target_is_directory=True)
    (root / "versions.json").write_text(json.dumps(VERSIONS), encoding="utf-8")
    (root / "index.html").write_text('<meta http-equiv="refresh" content="0; url=latest/">', encoding="utf-8")
    shutil.copy(DOCS / "root-404.html", root / "404.html")
    return root


@pytest.fixture(scope="module")
def served(published: Path) -> Iterator[str]:
    """The published layout on an HTTP server on loopback that answers a missing path with the
    root ``404.html``, as GitHub Pages does; yields its base URL."""
    import functools
    import http.server
    import threading

    class Pages(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
            if code != 404:
                return super().send_error(code, message, explain)
            body = (published / "404.html").read_bytes()
            self.send_response(404)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Pages, directory=str(published))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


#: The first line of each code block that scrolls sideways; a docstring's example in the API
#: reference is the source's (only its signatures are checked here).
SCROLLING = """[...document.querySelectorAll("pre > code")]
    .filter((code) => code.scrollWidth > code.clientWidth + 1)
    .filter((code) => code.closest(".doc-signature") || !code.closest(".doc-contents"))
    .map((code) => code.textContent.split("\\n")[0])"""
#: The text of an element, its child nodes' texts joined by a space ("0.7.0 latest").
PARTS = "el => [...el.childNodes].map(n => n.textContent.trim()).filter(Boolean).join(' ')"


def _text(view: Any, selector: str) -> list[str]:
    """The text of each element ``selector`` finds (see ``PARTS``)."""
    return [view.locator(selector).nth(i).evaluate(PARTS) for i in range(view.locator(selector).count())]


@pytest.mark.parametrize("page", list(SITE_PAGES))
def test_site_page_renders_in_a_browser(served: str, page: str, tmp_path: Path) -> None:
    """Each page loads every asset it asks for, is styled, highlights and offers to copy its code
    (none of which scrolls sideways), has an edit button to its source and the version selector,
    and renders to a screenshot (kept in ``ROLLMEM_DOCS_SCREENSHOTS`` when set)."""
    with _page() as (view, broken):
        view.goto(served + "latest/" + page, wait_until="networkidle")
        title = view.title()
        styled = view.evaluate("getComputedStyle(document.querySelector('.md-header')).position")
        highlighted = view.evaluate(
            "(() => { const token = document.querySelector('.highlight code span[class]');"
            " const text = document.querySelector('.md-typeset');"
            " return token && text ? getComputedStyle(token).color !== getComputedStyle(text).color"
            " : null })()"
        )
        copy_buttons = view.evaluate("document.querySelectorAll('[data-md-type=copy]').length")
        scrolling = view.evaluate(SCROLLING)
        edit = view.locator("a.md-content__button[rel=edit]").get_attribute("href")
        version = _text(view, ".md-version__current")
        shots = Path(os.environ.get("ROLLMEM_DOCS_SCREENSHOTS") or tmp_path)
        shots.mkdir(parents=True, exist_ok=True)
        shot = shots / f"{page.strip('/').replace('/', '-') or 'home'}.png"
        view.screenshot(path=str(shot))
    assert not broken, f"{page or 'home'}: assets that failed to load: {broken}"
    assert SITE_PAGES[page] in title
    assert styled in ("sticky", "fixed"), "the theme's stylesheet is not applied"
    assert highlighted is True, "code blocks are not highlighted"
    assert copy_buttons > 0, "code blocks have no copy button"
    assert not scrolling, f"code blocks that scroll sideways at 1280 pixels: {scrolling}"
    source = _page_of(_config_url("site_url") + page, _config_url("site_url"))
    assert edit == _config_url("repo_url") + _config_value("edit_uri") + source.relative_to(PAGES).as_posix()
    assert source.is_file()
    assert version == ["0.7.0 latest"], "the version selector does not show the version of the page"
    assert shot.stat().st_size > 20_000  # a page with content, not a blank one


def test_tutorial_in_a_browser(served: str) -> None:
    """The tutorial's two files are titled with their names, and its first link opens the page
    it names in the same version of the site."""
    with _page() as (view, broken):
        view.goto(served + "latest/tutorial/", wait_until="networkidle")
        files = view.locator(".md-typeset .highlight .filename").all_text_contents()
        view.locator(".md-typeset a", has_text="Saving state and sessions").first.click()
        view.wait_for_url(served + "latest/sessions/")
        title = view.title()
    assert not broken, broken
    assert files == ["chatbot.py", "test_chatbot.py"]
    assert "Saving state and sessions" in title


def test_version_selector_in_a_browser(served: str) -> None:
    """The selector lists every version; choosing one opens the same page in it; a version other
    than the latest release shows a banner whose link leads to the latest release."""
    with _page() as (view, broken):
        view.goto(served + "latest/controls/", wait_until="networkidle")
        listed = _text(view, ".md-version__link")
        banner_on_latest = view.locator("[data-md-component=outdated]").is_visible()
        view.hover(".md-version")
        view.locator(".md-version__link", has_text="dev").click()
        view.wait_for_url(served + "dev/controls/")
        view.wait_for_load_state("networkidle")
        version = _text(view, ".md-version__current")
        banner = view.locator("[data-md-component=outdated]")
        banner_on_dev = banner.is_visible()
        banner.locator("a").click()
        view.wait_for_url(served + "latest/")
    assert not broken, broken
    assert listed == ["dev", "0.7.0 latest"]
    assert version == ["dev"]
    assert not banner_on_latest
    assert banner_on_dev


def test_reference_search_in_a_browser(served: str) -> None:
    """Typing ``to_dict`` in the search box lists one hit per class, each naming its class."""
    with _page() as (view, broken):
        view.goto(served + "latest/reference/", wait_until="networkidle")
        view.locator("input.md-search__input").click()
        view.locator("input.md-search__input").press_sequentially("to_dict")
        view.locator(".md-search-result__item").first.wait_for()
        titles = view.locator(
            ".md-search-result__article h1, .md-search-result__article h2"
        ).all_text_contents()
    assert not broken, broken
    hits = [" ".join(title.split()) for title in titles if "to_dict" in title]
    assert [hit for hit in hits if not re.fullmatch(r"\w+\.to_dict", hit)] == []
    assert {"RollingMemory.to_dict", "Message.to_dict", "ToolCall.to_dict"} <= set(hits)
    assert len(hits) == len(set(hits)), hits


def test_unversioned_link_redirects_in_a_browser(served: str) -> None:
    """A link without a version (an older README's) opens the page in the latest release; a page
    a version lacks says so."""
    with _page() as (view, _):
        view.goto(served + "controls/#pinned-messages")
        view.wait_for_url(served + "latest/controls/#pinned-messages")
        title = view.title()
        view.goto(served + "0.7/no-such-page/", wait_until="networkidle")
        missing = view.locator("#missing").is_visible()
        home = view.locator("#missing a").get_attribute("href")
    assert "Controls" in title
    assert missing
    assert home == "/"


# -- the README as the package index shows it ----------------------------------------------------

HREF = re.compile(r"""(?:href|src)="([^"]*)\"""")


def _config_value(key: str) -> str:
    match = re.search(rf"^{key}: *(\S+)", (DOCS / "mkdocs.yml").read_text(encoding="utf-8"), re.MULTILINE)
    assert match is not None, f"docs/mkdocs.yml sets no {key}"
    return match.group(1)


def _config_url(key: str) -> str:
    return _config_value(key).rstrip("/") + "/"


def _page_of(url: str, site: str) -> Path:
    """The page source behind a link into the docs site: ``SITE/controls/`` is ``controls.md``,
    and so are ``SITE/latest/controls/`` and ``SITE/0.7/controls/`` (a version's folder; a link
    without one goes to the latest release, see development.md)."""
    page = re.sub(r"^(latest|dev|\d+\.\d+)(/|$)", "", url[len(site) :].split("#", 1)[0]).rstrip("/")
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
