import Foundation
import NIOCore
import NIOPosix
import NIOWebSocket
@testable import RealtimeCore
import Testing

/// A connection reset while the client completes the WebSocket upgrade: the server answers 101 and
/// resets at once. Every connect must end quickly with a typed error. (The upgrade can finish after
/// NIO has already failed its result; `WebSocketClientChannel.UpgradedChannelCustody` then finishes
/// the orphaned channel, which, dropped unfinished, trapped a debug CI run with "Deinited
/// NIOAsyncWriter without calling finish()".)
///
/// Known gap, not covered here: a FIN instead of the reset, under load, sometimes goes unnoticed
/// until the 30 s auto-ping (the half-closure can arrive before the channel is handed over); see
/// Docs/Architecture.md, "WebSocket".
@Suite("WebSocket: the connection is reset during the upgrade", .serialized, .timeLimit(.minutes(2)))
struct WebSocketUpgradeRaceTests {
    @Test("101 then RST, 200 times: every connect ends with a typed error within the connect timeout")
    func upgradeThenReset() async throws {
        let peer = try await RawUpgradePeer.start(then: .reset)
        var codes: [RealtimeError.Code: Int] = [:]
        var opened = 0
        let started = ContinuousClock.now
        for _ in 0..<200 {
            do {
                try await WebSocketTransport.connect(
                    to: "ws://127.0.0.1:\(peer.port)/", configuration: WebSocketConfiguration(connectTimeout: .seconds(5))
                ) { connection in
                    for try await _ in connection.inbound {}
                }
                opened += 1
            } catch let error as RealtimeError {
                codes[error.code, default: 0] += 1
            }
        }
        await peer.stop()
        #expect(codes.values.reduce(0, +) + opened == 200)
        #expect(opened == 0, "a reset connection never ends normally")
        #expect(Set(codes.keys).isSubset(of: [.connectionClosed, .connectFailed]), "\(codes)")
        #expect(ContinuousClock.now - started < .seconds(60))
    }
}
