#!/bin/sh
# The secure broker's entrypoint in docker-compose.yml (apache/kafka image): the same
# server.properties as dev/stack, SCRAM users added when the storage is first formatted.
set -eu
conf=/tmp/server.properties
sh /infra/server-properties.sh >"$conf"
if [ ! -f "$DATA_DIR/meta.properties" ]; then
  /opt/kafka/bin/kafka-storage.sh format -t "$(/opt/kafka/bin/kafka-storage.sh random-uuid)" -c "$conf" \
    --add-scram "SCRAM-SHA-256=[name=$KAFKA_USER,password=$KAFKA_PASSWORD]" \
    --add-scram "SCRAM-SHA-512=[name=$KAFKA_USER,password=$KAFKA_PASSWORD]"
fi
exec /opt/kafka/bin/kafka-server-start.sh "$conf"
