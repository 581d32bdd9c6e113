-- SPDX-License-Identifier: MIT
-- An in-memory SQLite workload for bench/run.py: inserts, an index, joins and grouping.
CREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT, v INTEGER, pad TEXT);
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 200000)
INSERT INTO t SELECT i, printf('key%08d', (i * 7919) % 200000), i % 1000, hex(randomblob(16)) FROM c;
CREATE INDEX t_k ON t(k);
CREATE TABLE g AS SELECT v, count(*) AS n, max(k) AS mk FROM t GROUP BY v;
SELECT count(*), sum(n) FROM g JOIN t ON t.v = g.v WHERE t.id % 10 = 0;
SELECT count(DISTINCT substr(pad, 1, 3)) FROM t;
