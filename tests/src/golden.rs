//! The golden source table: one column of every common PostgreSQL type, one row holding a
//! value in each, shared by the decode and raw-layer read-back tests.
//!
//! `MOOD` in [`COLUMNS`] stands for an enum type the test creates (`sad`, `ok`, `happy`).

pub const COLUMNS: &str = "id bigint PRIMARY KEY, i2 smallint, i4 integer, f4 real, f8 double precision,
  n102 numeric(10,2), n numeric, n386 numeric(38,6), b boolean, t text, vc varchar(20), c3 char(3),
  by bytea, d date, tm time, tm3 time(3), ttz timetz, ts timestamp, ts3 timestamp(3), tstz timestamptz,
  iv interval, u uuid, j json, jb jsonb, x xml, bt bit(4), bv bit varying(8), ai int4[], at text[],
  mo MOOD, inet_ inet, cidr_ cidr, mac macaddr, pt point, money_ money, tsv tsvector, i8r int8range";

pub const VALUES: &str = "1, -32768, 2147483647, 1.5, -2.25e300, 12345678.91,
  3.14159265358979323846264338327950288419716939937510, 12345678901234567890123456789012.123456,
  true, 'héllo ☃', 'vc', 'ab', '\\x00ff10', '2024-02-29', '23:59:59.999999', '12:00:00.123',
  '12:00:00+02', '2024-02-29 12:34:56.789012', '1999-12-31 23:59:59.999',
  '2024-02-29 12:34:56.789012+00', '1 year 2 months 3 days 04:05:06.789',
  'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{\"a\": [1, 2]}', '{\"b\": {\"c\": null}}', '<r a=\"1\">x</r>',
  B'1010', B'101', '{1,NULL,3}', '{\"a\",\"b c\"}', 'happy', '192.168.0.1/24', '10.0.0.0/8',
  '08:00:2b:01:02:03', '(1.5,-2)', 12.34, 'a fat cat', '[1,10)'";
