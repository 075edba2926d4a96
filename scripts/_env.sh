# Shared bootstrap for scripts/test and scripts/run. Source it; don't execute it.
# After sourcing, the cwd is the repository root.

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"

# Run a command as root (directly, or via sudo when we are not root).
_as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# System packages: install what scripts/apt-packages.txt lists (one name per
# line, '#' comments allowed), but only if something is missing (mosquitto, tshark, …).
# No-op when everything is already present.
install_system_packages() {
    local list="$REPO_ROOT/scripts/apt-packages.txt" pkg missing=()
    [ -f "$list" ] || return 0
    while read -r pkg; do
        [ -n "$pkg" ] || continue
        dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
    done < <(sed -e 's/#.*//' -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' "$list")
    [ "${#missing[@]}" -gt 0 ] || return 0
    echo "installing system packages: ${missing[*]}" >&2
    _as_root apt-get update
    _as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
}

# Node packages: if package.json exists, run `npm ci` (or `npm install` without
# a lockfile) when node_modules is missing or older than package.json/lockfile.
# No-op otherwise.
install_node_packages() {
    [ -f "$REPO_ROOT/package.json" ] || return 0
    local stamp="$REPO_ROOT/node_modules/.ksp-install-stamp"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$(_node_inputs_hash)" ]; then
        return 0
    fi
    if [ -f package-lock.json ]; then npm ci; else npm install; fi
    mkdir -p node_modules
    _node_inputs_hash > "$stamp"   # after install: `npm install` may write the lockfile
}

_node_inputs_hash() {
    cat package.json $( [ -f package-lock.json ] && echo package-lock.json ) | sha256sum | cut -d' ' -f1
}

# Python: create .venv if missing and install the project (editable) with the
# given extras, e.g. ensure_venv "[test]", at the versions constraints.txt fixes; setuptools
# too, for `python setup.py build_ext --inplace` (a new venv has none, or one too old for
# pyproject's licence fields).
ensure_venv() {
    local extras="${1:-}" stamp=".venv/.ksp-install-stamp" want
    if [ ! -x .venv/bin/python ]; then
        python3 -m venv .venv
    fi
    # pip only when what the install depends on changed (it takes seconds even with nothing to
    # do): the extras asked for, the project's metadata, the versions and the C module it compiles.
    want="$(cat pyproject.toml constraints.txt setup.py ksp/_speedups.c 2>/dev/null | sha256sum | cut -d' ' -f1) ${extras}"
    if [ -f "$stamp" ] && grep -qxF -- "$want" "$stamp"; then
        return 0
    fi
    .venv/bin/pip install -q -c constraints.txt setuptools -e ".${extras}"
    # Keep the lines of this hash (other extras installed with it), drop older hashes.
    { grep -F -- "${want%% *} " "$stamp" 2>/dev/null || true; echo "$want"; } > "$stamp.new"
    mv "$stamp.new" "$stamp"
}

# MicroPython board stubs for pyright (tests/test_firmware_build.py): each board's pinned stub
# packages go with `pip --target` into typings/<board>/ (pyright's typeshed path there, see
# device_firmware/pyrightconfig.<board>.json). Reinstalled only when the pins change.
BOARD_STUBS=(
    "esp32 micropython-esp32-stubs==1.29.0.post1 micropython-stdlib-stubs==1.29.0.post2"
    "rp2 micropython-rp2-rpi_pico_w-stubs==1.29.0.post1 micropython-stdlib-stubs==1.29.0.post2"
)
install_board_stubs() {
    local entry board stamp
    for entry in "${BOARD_STUBS[@]}"; do
        board="${entry%% *}"
        stamp="$REPO_ROOT/typings/$board/.ksp-stubs"
        if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$entry" ]; then continue; fi
        rm -rf "$REPO_ROOT/typings/$board"
        # shellcheck disable=SC2086  # the package list is meant to split
        .venv/bin/pip install -q --no-user --target "$REPO_ROOT/typings/$board" ${entry#* }
        echo "$entry" > "$stamp"
    done
}

# The W3C SPARQL test suites (tests/test_w3c_sparql.py): rdflib's source distribution carries
# them (test/data/suites/w3c: sparql11 and dawg-data-r2, W3C licence), from the package index
# the project already installs from and at the rdflib version constraints.txt fixes. Unpacked
# into tests/w3c/ (not committed); fetched again only when that version changes.
W3C_SUITES_FROM="$(grep -i '^rdflib==' "$REPO_ROOT/constraints.txt")"
install_w3c_suites() {
    local dest="$REPO_ROOT/tests/w3c" stamp="$REPO_ROOT/tests/w3c/.ksp-suites" tmp
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$W3C_SUITES_FROM" ]; then return 0; fi
    tmp="$(mktemp -d)"
    .venv/bin/pip download -q --no-deps --no-binary :all: -d "$tmp" "$W3C_SUITES_FROM"
    rm -rf "$dest"
    mkdir -p "$dest"
    tar -xzf "$tmp"/rdflib-*.tar.gz -C "$tmp"
    cp -r "$tmp"/rdflib-*/test/data/suites/w3c/sparql11 "$tmp"/rdflib-*/test/data/suites/w3c/dawg-data-r2 "$dest/"
    rm -rf "$tmp"
    echo "$W3C_SUITES_FROM" > "$stamp"
}

bootstrap() {
    install_system_packages
    install_node_packages
    ensure_venv "${1:-}"
    case "${1:-}" in *test*) install_board_stubs; install_w3c_suites ;; esac
}
