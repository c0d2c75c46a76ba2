package mongoprobe.bench;

import de.bwaldvogel.mongo.MongoServer;
import de.bwaldvogel.mongo.ServerVersion;
import de.bwaldvogel.mongo.backend.memory.MemoryBackend;

import java.net.InetSocketAddress;
import java.util.concurrent.CountDownLatch;

/**
 * Server - mongo-java-server (memory backend, ServerVersion.MONGO_5_0: wire version 8)
 * on a loopback port, until SIGTERM or SIGINT.
 *
 * USAGE: java -cp mongoprobe-bench.jar mongoprobe.bench.Server [--port N] [--host ADDR]
 *
 * When it accepts connections it prints one JSON line on stdout:
 *   {"port": 40123, "pid": 4127, "server": "mongo-java-server", "version": "MONGO_5_0", "wire_version": 8}
 * --port 0 (the default) lets the kernel choose a free port.
 */
public final class Server {
    public static void main(String[] args) throws Exception {
        String host = "127.0.0.1";
        int port = 0;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--port" -> port = Integer.parseInt(args[++i]);
                case "--host" -> host = args[++i];
                default -> {
                    System.err.println("Server: unknown argument " + args[i]
                            + " (usage: Server [--port N] [--host ADDR])");
                    System.exit(2);
                }
            }
        }
        ServerVersion version = ServerVersion.MONGO_5_0;
        MongoServer server = new MongoServer(new MemoryBackend().version(version));
        server.bind(host, port);
        InetSocketAddress addr = server.getLocalAddress();
        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            server.shutdownNow();
            stopped.countDown();
        }));
        System.out.printf("{\"port\": %d, \"pid\": %d, \"server\": \"mongo-java-server\", "
                        + "\"version\": \"%s\", \"wire_version\": %d}%n",
                addr.getPort(), ProcessHandle.current().pid(), version.name(),
                version.getWireVersion());
        System.out.flush();
        stopped.await();
    }
}
