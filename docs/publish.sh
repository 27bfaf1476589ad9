#!/usr/bin/env bash
# Publishes this checkout's documentation as one version of the site, in the gh-pages branch
# GitHub Pages serves, with mike (the `docs` extra). Run from the workflows:
#   bash docs/publish.sh dev                 docs.yml: main, on every push
#   bash docs/publish.sh 0.7 0.7.1 latest    release.yml: a release, in the folder of its minor
#                                            version, titled with its version; `latest` moves to it
# The site's root goes to `latest` once a release exists (else to the version just published), and
# holds docs/root-404.html as its 404.html: a link without a version opens the latest release.
# ROLLMEM_DOCS_PUSH=0 commits to the local gh-pages branch only (to try it in a clone).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
version=$1 title=${2:-$1} alias=${3:-}
config=docs/mkdocs.yml
export NO_MKDOCS_2_WARNING=1

git fetch --depth=1 origin gh-pages:gh-pages 2>/dev/null || echo "no gh-pages on origin yet: mike starts it"
mike deploy --config-file "$config" --title "$title" ${alias:+--update-aliases} "$version" ${alias:+"$alias"}
if mike list --config-file "$config" latest >/dev/null 2>&1; then default=latest; else default=$version; fi
mike set-default --config-file "$config" "$default"

pages=$(mktemp -d)
git worktree add -q "$pages" gh-pages
cp docs/root-404.html "$pages/404.html"
git -C "$pages" add 404.html
git -C "$pages" diff --cached --quiet || git -C "$pages" commit -q -m "404.html: a link without a version opens the latest release"
git worktree remove "$pages"

if [ "${ROLLMEM_DOCS_PUSH:-1}" = 1 ]; then git push origin gh-pages; fi
