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
        configuration.engine.connectTimeout = .seconds(5)
        configuration.reconnectionDelay = .milliseconds(50)
        configuration.reconnectionDelayMax = .milliseconds(200)
        configuration.reachability = AlwaysReachable()
        return configuration
    }
}
