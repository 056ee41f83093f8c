// Apache Iceberg's REST catalog test server, bound to loopback. RESTCatalogServer.main listens on
// every interface, so this launcher wires the same parts (a backend catalog behind
// RESTCatalogAdapter and RESTCatalogServlet) onto a Jetty connector at 127.0.0.1. Run by dev/stack
// as a single-file source program: java -cp 'libs/*' RestFixture.java PORT
//
// Catalog properties come from CATALOG_* variables as in the apache/iceberg-rest-fixture image:
// CATALOG_S3_PATH__STYLE__ACCESS=true is s3.path-style-access=true.
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.rest.RESTCatalogAdapter;
import org.apache.iceberg.rest.RESTCatalogServlet;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import org.eclipse.jetty.servlet.ServletContextHandler;
import org.eclipse.jetty.servlet.ServletHolder;

public class RestFixture {
  public static void main(String[] args) throws Exception {
    int port = Integer.parseInt(args[0]);
    Map<String, String> props = new HashMap<>();
    System.getenv().forEach((k, v) -> {
      if (k.startsWith("CATALOG_")) {
        String key = k.substring("CATALOG_".length()).toLowerCase(Locale.ROOT)
            .replace("__", "-").replace("_", ".");
        props.put(key, v);
      }
    });
    props.putIfAbsent("catalog-impl", "org.apache.iceberg.jdbc.JdbcCatalog");
    // A pooled connection whose PostgreSQL restarted (the outage tests restart the replica's)
    // fails with 57P01, "terminating connection due to administrator command": reconnect and
    // retry, as for the SQL states JdbcClientPool retries by default (08xxx, 40001).
    props.putIfAbsent("retryable_status_codes", "57P01");
    Catalog catalog = CatalogUtil.buildIcebergCatalog("rest_backend", props, new Configuration());

    ServletContextHandler context = new ServletContextHandler(ServletContextHandler.NO_SESSIONS);
    context.addServlet(new ServletHolder(new RESTCatalogServlet(new RESTCatalogAdapter(catalog))), "/*");
    Server server = new Server();
    ServerConnector http = new ServerConnector(server);
    http.setHost("127.0.0.1");
    http.setPort(port);
    server.addConnector(http);
    server.setHandler(context);
    server.start();
    System.out.println("Iceberg REST catalog on 127.0.0.1:" + port + " over " + props.get("uri"));
    server.join();
  }
}
