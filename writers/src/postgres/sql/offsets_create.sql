CREATE TABLE IF NOT EXISTS {offsets} (
    group_id text NOT NULL,
    topic text NOT NULL,
    partition integer NOT NULL,
    next_offset bigint NOT NULL,
    PRIMARY KEY (group_id, topic, partition)
)
