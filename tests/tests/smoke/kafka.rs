use std::time::Duration;

use lakesink_tests::{Stack, unique, unreachable};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

const RECORDS: i64 = 20;

#[tokio::test]
async fn produce_and_consume_through_a_consumer_group() {
    let stack = Stack::from_env();
    let topic = unique("smoke-kafka");
    let group = unique("smoke-group");

    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &stack.kafka_brokers)
        .create()
        .expect("admin client");
    let opts = AdminOptions::new().request_timeout(Some(Duration::from_secs(10)));
    let created = admin
        .create_topics(
            &[NewTopic::new(&topic, 2, TopicReplication::Fixed(1))],
            &opts,
        )
        .await
        .unwrap_or_else(|e| panic!("{}", unreachable("Kafka", &stack.kafka_brokers, e)));
    created[0].as_ref().unwrap_or_else(|e| {
        panic!(
            "{}",
            unreachable("Kafka", &stack.kafka_brokers, format!("{e:?}"))
        )
    });

    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &stack.kafka_brokers)
        .set("message.timeout.ms", "10000")
        .set("enable.idempotence", "true")
        .create()
        .expect("producer");
    for i in 0..RECORDS {
        let key = format!("k{}", i % 4);
        let value = format!("v{i}");
        producer
            .send(
                FutureRecord::to(&topic).key(&key).payload(&value),
                Duration::from_secs(10),
            )
            .await
            .unwrap_or_else(|(e, _)| panic!("{}", unreachable("Kafka", &stack.kafka_brokers, e)));
    }

    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", &stack.kafka_brokers)
        .set("group.id", &group)
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .set("partition.assignment.strategy", "cooperative-sticky")
        .create()
        .expect("consumer");
    consumer.subscribe(&[&topic]).expect("subscribe");

    let mut seen = Vec::new();
    while seen.len() < RECORDS as usize {
        let msg = tokio::time::timeout(Duration::from_secs(30), consumer.recv())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "{}",
                    unreachable("Kafka", &stack.kafka_brokers, "no record within 30 s")
                )
            })
            .expect("consume");
        let value = String::from_utf8(msg.payload().expect("payload").to_vec()).expect("utf8");
        seen.push(value);
        consumer
            .commit_message(&msg, CommitMode::Sync)
            .expect("commit");
    }
    seen.sort_by_key(|v| v[1..].parse::<i64>().expect("number"));
    let expected: Vec<String> = (0..RECORDS).map(|i| format!("v{i}")).collect();
    assert_eq!(seen, expected);

    // The group's committed offsets cover every record, across both partitions.
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(&topic, 0);
    tpl.add_partition(&topic, 1);
    let committed = consumer
        .committed_offsets(tpl, Duration::from_secs(10))
        .expect("committed offsets");
    let total: i64 = committed
        .elements()
        .iter()
        .map(|e| match e.offset() {
            Offset::Offset(o) => o,
            _ => 0,
        })
        .sum();
    assert_eq!(total, RECORDS);

    admin
        .delete_topics(&[&topic], &opts)
        .await
        .expect("delete topic");
}
