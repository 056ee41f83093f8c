#!/bin/sh
# Prints the secure Kafka broker's server.properties, for dev/stack and docker-compose.yml:
# a single-node KRaft cluster with one listener per way in and no plaintext one.
#   SASL     SASL_PLAINTEXT, PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (also the inter-broker listener)
#   SSL      SSL, the server certificate from tls.sh
#   SASLSSL  SASL_SSL, PLAIN, SCRAM-SHA-512, OAUTHBEARER (as OAUTH)
#   OAUTH    SASL_PLAINTEXT, OAUTHBEARER checked by Kafka's unsecured validator (alg none)
# Users: $KAFKA_USER (PLAIN here; SCRAM credentials are added when the storage is formatted)
# and admin (PLAIN, the broker's own login). No authorizer: authenticated principals may do
# anything.
# Environment: DATA_DIR TLS_DIR BIND_HOST ADVERTISED_HOST SASL_PORT SSL_PORT SASL_SSL_PORT
# OAUTH_PORT CONTROLLER_PORT KAFKA_USER KAFKA_PASSWORD KAFKA_ADMIN_PASSWORD
set -eu
plain="org.apache.kafka.common.security.plain.PlainLoginModule required username=\"admin\" password=\"$KAFKA_ADMIN_PASSWORD\" user_admin=\"$KAFKA_ADMIN_PASSWORD\" user_$KAFKA_USER=\"$KAFKA_PASSWORD\";"
scram="org.apache.kafka.common.security.scram.ScramLoginModule required;"
oauth="org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub=\"admin\";"
unsecured=org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler
b=$BIND_HOST a=$ADVERTISED_HOST
cat <<E2
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CONTROLLER_PORT
listeners=SASL://$b:$SASL_PORT,SSL://$b:$SSL_PORT,SASLSSL://$b:$SASL_SSL_PORT,OAUTH://$b:$OAUTH_PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=SASL://$a:$SASL_PORT,SSL://$a:$SSL_PORT,SASLSSL://$a:$SASL_SSL_PORT,OAUTH://$a:$OAUTH_PORT
listener.security.protocol.map=SASL:SASL_PLAINTEXT,SSL:SSL,SASLSSL:SASL_SSL,OAUTH:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=SASL
sasl.mechanism.inter.broker.protocol=PLAIN
listener.name.sasl.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl.plain.sasl.jaas.config=$plain
listener.name.sasl.scram-sha-256.sasl.jaas.config=$scram
listener.name.sasl.scram-sha-512.sasl.jaas.config=$scram
listener.name.saslssl.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512,OAUTHBEARER
listener.name.saslssl.plain.sasl.jaas.config=$plain
listener.name.saslssl.scram-sha-512.sasl.jaas.config=$scram
listener.name.saslssl.oauthbearer.sasl.jaas.config=$oauth
listener.name.saslssl.oauthbearer.sasl.server.callback.handler.class=$unsecured
listener.name.oauth.sasl.enabled.mechanisms=OAUTHBEARER
listener.name.oauth.oauthbearer.sasl.jaas.config=$oauth
listener.name.oauth.oauthbearer.sasl.server.callback.handler.class=$unsecured
ssl.keystore.type=PEM
ssl.keystore.location=$TLS_DIR/server-keystore.pem
log.dirs=$DATA_DIR
num.partitions=1
auto.create.topics.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
# As the main broker: no time-based retention, the tests' records carry 2024 timestamps.
log.retention.ms=-1
E2
