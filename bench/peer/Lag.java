// Polls a sink connector's consumer group until its lag on TOPIC is zero (the same numbers as
// `kafka-consumer-groups.sh --describe`: end offset minus committed offset, per partition), in one
// JVM so that polling does not load the machine being measured.
//   java -cp KAFKA_LIBS:DIR Lag BOOTSTRAP GROUP TOPIC EXPECTED_RECORDS TIMEOUT_SECONDS [READY_FILE]
// Prints "lag-zero EPOCH_MS COMMITTED_RECORDS" and exits 0, or exits 1 on timeout. With
// READY_FILE, creates it after the first poll, so that the sink under test can be started once
// this JVM is warm rather than alongside its start-up.
import java.util.*;
import java.util.stream.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;

public class Lag {
  public static void main(String[] a) throws Exception {
    String bootstrap = a[0], group = a[1], topic = a[2];
    long expected = Long.parseLong(a[3]);
    long deadline = System.currentTimeMillis() + Long.parseLong(a[4]) * 1000;
    java.nio.file.Path ready = a.length > 5 ? java.nio.file.Path.of(a[5]) : null;
    Properties p = new Properties();
    p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    try (Admin admin = Admin.create(p)) {
      List<TopicPartition> tps = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic)
          .partitions().stream().map(i -> new TopicPartition(topic, i.partition())).collect(Collectors.toList());
      Map<TopicPartition, OffsetSpec> latest = tps.stream().collect(Collectors.toMap(t -> t, t -> OffsetSpec.latest()));
      Map<TopicPartition, OffsetSpec> earliest = tps.stream().collect(Collectors.toMap(t -> t, t -> OffsetSpec.earliest()));
      long lastReport = 0;
      while (true) {
        var end = admin.listOffsets(latest).all().get();
        var start = admin.listOffsets(earliest).all().get();
        Map<TopicPartition, OffsetAndMetadata> committed =
            admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
        long lag = 0, done = 0, total = 0; int missing = 0;
        for (TopicPartition tp : tps) {
          long e = end.get(tp).offset(), s = start.get(tp).offset();
          total += e - s;
          OffsetAndMetadata c = committed.get(tp);
          if (c == null) { missing++; lag += e - s; continue; }
          lag += e - c.offset(); done += c.offset() - s;
        }
        long now = System.currentTimeMillis();
        if (missing == 0 && lag == 0 && done >= expected) {
          System.out.println("lag-zero " + now + " " + done);
          return;
        }
        if (now - lastReport >= 10_000) {
          System.err.printf("[lag] group %s: committed %d of %d, lag %d, partitions without offsets %d%n",
              group, done, total, lag, missing);
          lastReport = now;
        }
        if (now > deadline) { System.err.println("[lag] timed out"); System.exit(1); }
        if (ready != null && !java.nio.file.Files.exists(ready)) java.nio.file.Files.createFile(ready);
        // Every 50 ms: the end of a run is seen within 50 ms, whichever sink it is.
        Thread.sleep(50);
      }
    }
  }
}
