#!/bin/sh
# SPDX-License-Identifier: MIT
# A server under load for bench/run.py: redis-server runs under the allocator of the
# caller's LD_PRELOAD on a private Unix socket, redis-benchmark (under glibc) sends it
# SET, GET, LPUSH, LPOP, SADD, HSET and MSET requests from 20 clients, then redis-cli
# reads back what the server holds. Prints only that, which must not depend on the
# allocator. Usage: redis.sh REQUESTS
set -eu
n=${1:-100000}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
preload=${LD_PRELOAD:-}
unset LD_PRELOAD
LD_PRELOAD=$preload redis-server --port 0 --unixsocket "$dir/s" --save '' --appendonly no \
    --dir "$dir" --daemonize no --loglevel warning > "$dir/log" 2>&1 &
server=$!
i=0
while [ ! -S "$dir/s" ]; do
    i=$((i + 1))
    [ $i -lt 6000 ] || { cat "$dir/log" >&2; kill $server; exit 1; }
    sleep 0.01
done
redis-benchmark -s "$dir/s" -q -c 20 -n "$n" -r 50000 -d 100 \
    -t set,get,lpush,lpop,sadd,hset,mset > /dev/null
# What the benchmark left is random (-r): the check is a fixed data set written after it.
redis-cli -s "$dir/s" flushall > /dev/null
awk -v n="$n" 'BEGIN { for (i = 0; i < n / 10; i++)
    printf "SET key:%d %0100d\r\nHSET h:%d f%d v%d\r\nLPUSH l:%d %d\r\n", i, i, i % 97, i, i, i % 13, i }' |
    redis-cli -s "$dir/s" --pipe > /dev/null
redis-cli -s "$dir/s" dbsize
redis-cli -s "$dir/s" get key:7
redis-cli -s "$dir/s" hlen h:5
redis-cli -s "$dir/s" lrange l:3 0 4 | tr '\n' ' '
echo
redis-cli -s "$dir/s" shutdown nosave > /dev/null 2>&1 || true
wait $server || true
