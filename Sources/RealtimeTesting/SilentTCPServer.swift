import NIOCore
import NIOPosix

/// A TCP listener on 127.0.0.1 that accepts connections and never says anything: for testing that
/// clients time out instead of hanging on a server that stalls.
public final class SilentTCPServer: Sendable {
    /// The port, on 127.0.0.1.
    public let port: Int
    private let channel: any Channel

    private init(port: Int, channel: any Channel) {
        self.port = port
        self.channel = channel
    }

    /// Starts listening on 127.0.0.1 with an ephemeral port.
    public static func start() async throws -> SilentTCPServer {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .bind(host: "127.0.0.1", port: 0).get()
        return SilentTCPServer(port: channel.localAddress?.port ?? 0, channel: channel)
    }

    /// Stops the server and closes its connections; waits until they are closed.
    public func stop() async {
        try? await channel.close()
    }
}
