-- docker-compose's MariaDB source: the grants Debezium's MariaDB connector documents (snapshot
-- reads and locks, binlog reads and positions), as dev/stack gives them.
GRANT SELECT, RELOAD, SHOW DATABASES, LOCK TABLES, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'lakesink'@'%';
