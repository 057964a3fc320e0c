import Foundation
import NIOConcurrencyHelpers
import RealtimeCore
import RealtimeTesting
import SocketIOEngine

func peerScript(_ name: String) -> String {
    URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Peers/\(name)").path
}

extension SocketIOConfiguration {
    /// Fast reconnects, no reachability probing: for loopback tests.
    static func testing(_ transports: [EngineIOOptions.Transport] = [.polling, .websocket], upgrade: Bool = true) -> SocketIOConfiguration {
        var configuration = SocketIOConfiguration()
        configuration.engine.transports = transports
        configuration.engine.upgrade = upgrade
        // 30 s: on two busy cores opening a loopback WebSocket has taken over 5 s, and a probe that
        // times out leaves the session on polling, which a test of the upgrade misreads.
        configuration.engine.connectTimeout = .seconds(30)
        configuration.reconnectionDelay = .milliseconds(50)
        configuration.reconnectionDelayMax = .milliseconds(200)
        configuration.reachability = AlwaysReachable()
        return configuration
    }
}
