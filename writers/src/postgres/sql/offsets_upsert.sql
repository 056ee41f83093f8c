-- Offsets only move forward: a replayed batch never rewinds them.
INSERT INTO {offsets} AS o (group_id, topic, partition, next_offset)
SELECT $1, p.topic, p.partition, p.next_offset
FROM UNNEST($2::text[], $3::integer[], $4::bigint[]) AS p(topic, partition, next_offset)
ON CONFLICT (group_id, topic, partition)
DO UPDATE SET next_offset = GREATEST(o.next_offset, EXCLUDED.next_offset)
