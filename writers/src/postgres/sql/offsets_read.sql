SELECT partition, next_offset
FROM {offsets}
WHERE group_id = $1 AND topic = $2 AND partition = ANY($3::integer[])
