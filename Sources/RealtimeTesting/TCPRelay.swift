import Foundation
import NIOConcurrencyHelpers

/// A plain TCP relay in a process of its own (`Scripts/peers/tcp_relay.py`) between a client and a
/// server on loopback, for the faults a network makes: ``kill()`` ends it with SIGKILL, as a relay,
/// a proxy or a NAT box that dies, so the client's connection ends without a TLS close or a
/// WebSocket close frame; ``restart()`` listens again on the same port.
public final class TCPRelay: Sendable {
    /// The port clients connect to, on 127.0.0.1.
    public let port: Int
    /// The server's port, on 127.0.0.1.
    public let targetPort: Int
    private let peer: NIOLockedValueBox<PythonPeer?>

    private init(port: Int, targetPort: Int, peer: PythonPeer) {
        self.port = port
        self.targetPort = targetPort
        self.peer = NIOLockedValueBox(peer)
    }

    static var scriptPath: String {
        PythonPeer.repositoryRoot.appendingPathComponent("Scripts/peers/tcp_relay.py").path
    }

    /// Starts a relay on an ephemeral port to `targetPort`.
    public static func start(to targetPort: Int) async throws -> TCPRelay {
        let peer = try await PythonPeer.start(scriptPath: scriptPath, arguments: ["0", "\(targetPort)"])
        return TCPRelay(port: peer.port, targetPort: targetPort, peer: peer)
    }

    /// `url` with its port replaced by the relay's.
    public func relayed(_ url: String) -> String {
        guard var components = URLComponents(string: url) else { return url }
        components.port = port
        return components.string ?? url
    }

    /// Kills the relay with SIGKILL; returns once it has exited (its connections are gone).
    public func kill() async {
        let current = peer.withLockedValue { peer -> PythonPeer? in
            defer { peer = nil }
            return peer
        }
        await current?.killAbruptly()
    }

    /// Starts the relay again on the same port (after ``kill()``).
    public func restart() async throws {
        await kill()
        let started = try await PythonPeer.start(scriptPath: Self.scriptPath, arguments: ["\(port)", "\(targetPort)"])
        peer.withLockedValue { $0 = started }
    }

    /// Stops the relay.
    public func stop() async {
        let current = peer.withLockedValue { peer -> PythonPeer? in
            defer { peer = nil }
            return peer
        }
        await current?.stop()
    }
}
