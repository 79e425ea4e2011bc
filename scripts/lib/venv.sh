# Sourced by the steps in scripts/test.d: a virtualenv under .data/ made once from a requirements
# file in which every package is pinned by hash (pip --require-hashes, no dependency resolution,
# so nothing unpinned is fetched). Its folder name carries the file's hash, so a changed file
# makes a new one.
#
#   . scripts/lib/venv.sh
#   VENV="$(hashed_venv LABEL path/to/requirements.txt)"

hashed_venv() {
    local label="$1" requirements="$2" venv
    venv=".data/$label-$(sha256sum "$requirements" | cut -c1-12)"
    if [ ! -f "$venv/installed" ]; then
        echo "$label: installing into $venv" >&2
        if ! python3 -c 'import ensurepip' 2>/dev/null; then
            if [ "$(id -u)" != 0 ]; then
                echo "$label: python3 cannot make virtualenvs; run 'apt-get install -y python3-venv' as root" >&2
                return 1
            fi
            apt-get update >&2
            DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-venv >&2
        fi
        rm -rf "$venv"
        python3 -m venv "$venv" >&2
        "$venv/bin/pip" install --quiet --disable-pip-version-check --require-hashes --no-deps \
            -r "$requirements" >&2
        touch "$venv/installed"
    fi
    echo "$venv"
}
