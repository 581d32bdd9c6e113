-- SPDX-License-Identifier: MIT
-- An in-memory database of 200k rows for the preload test: inserts, an index, group by,
-- joins, string functions and sorting.
CREATE TABLE items(id INTEGER PRIMARY KEY, cat INTEGER, name TEXT, price REAL, note TEXT);
CREATE TABLE cats(id INTEGER PRIMARY KEY, label TEXT);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 200000)
INSERT INTO items
SELECT x, (x * 7919) % 1000, 'item-' || ((x * 31) % 50021), ((x * 104729) % 100000) / 100.0,
       substr('abcdefghijklmnopqrstuvwxyz', 1 + x % 26) || printf('%08d', x * 13)
FROM c;
WITH RECURSIVE c(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM c WHERE x < 999)
INSERT INTO cats SELECT x, 'category ' || printf('%04d', x) || ' ' || hex(x * 12345) FROM c;
CREATE INDEX items_cat ON items(cat, price);
CREATE INDEX items_name ON items(name);
SELECT count(*), sum(price), min(name), max(name) FROM items;
SELECT cat, count(*), round(sum(price), 2), max(length(note)) FROM items
GROUP BY cat ORDER BY cat LIMIT 50;
SELECT c.label, count(*), round(avg(i.price), 3)
FROM items i JOIN cats c ON c.id = i.cat
WHERE i.price > 500 GROUP BY c.label ORDER BY 2 DESC, 1 LIMIT 40;
SELECT name, count(*) AS n FROM items GROUP BY name HAVING n > 4 ORDER BY n DESC, name LIMIT 30;
UPDATE items SET note = note || '-' || name WHERE id % 3 = 0;
DELETE FROM items WHERE id % 7 = 0;
SELECT count(*), sum(length(note)), group_concat(substr(note, 1, 3), '') IS NOT NULL FROM items;
SELECT a.id, b.id, a.name FROM items a JOIN items b ON a.name = b.name AND a.id < b.id
ORDER BY a.id, b.id LIMIT 25;
SELECT length(group_concat(name, ',')) FROM (SELECT name FROM items ORDER BY note DESC);
WITH t AS (SELECT cat, price, row_number() OVER (PARTITION BY cat ORDER BY price DESC, id) AS r
           FROM items)
SELECT cat, price FROM t WHERE r = 1 ORDER BY cat LIMIT 20;
