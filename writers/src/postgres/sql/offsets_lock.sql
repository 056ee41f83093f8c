-- The stored next offsets of the partitions an apply covers, locked until it commits.
SELECT o.topic, o.partition, o.next_offset
FROM {offsets} o
JOIN UNNEST($2::text[], $3::integer[]) AS p(topic, partition)
  ON o.topic = p.topic AND o.partition = p.partition
WHERE o.group_id = $1
FOR UPDATE OF o
