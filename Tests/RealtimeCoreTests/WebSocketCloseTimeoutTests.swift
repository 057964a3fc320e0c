import NIOConcurrencyHelpers
@testable import RealtimeCore
import RealtimeTesting
import Testing

/// A peer that never answers the close frame (it stopped reading: a hung server, or a proxy that
/// passed the upgrade and nothing after it) does not hold the connection open: `close()` ends it
/// after ``WebSocketConfiguration/closeTimeout``, and `abort()` ends it at once.
@Suite(.timeLimit(.minutes(2))) struct WebSocketCloseTimeoutTests {
    enum Ending: String, CaseIterable { case close, abort }

    @Test("the inbound sequence ends although the peer never answers the close frame", arguments: Ending.allCases)
    func unansweredClose(_ ending: Ending) async throws {
        let peer = try await RawUpgradePeer.start(then: .stall)
        let inboundEnded = NIOLockedValueBox(false)
        let started = NIOLockedValueBox(false)
        // closeTimeout is 300 ms; a minute would be the test's time limit: what ends the wait
        // within the 20 s below can only be the timer (close) or the abort.
        let client = Task {
            try await WebSocketTransport.connect(
                to: "ws://127.0.0.1:\(peer.port)/", configuration: WebSocketConfiguration(autoPing: nil, closeTimeout: .milliseconds(300))
            ) { connection in
                var iterator = connection.inbound.makeAsyncIterator()
                switch ending {
                case .close: try await connection.close(code: 1000, reason: "bye")
                case .abort: connection.abort()
                }
                started.withLockedValue { $0 = true }
                while try await iterator.next() != nil {}
                inboundEnded.withLockedValue { $0 = true }
            }
        }
        try await waitUntil("the close frame went out", limit: .seconds(20)) { started.withLockedValue { $0 } }
        try await waitUntil("the inbound sequence ended (\(ending))", limit: .seconds(20)) { inboundEnded.withLockedValue { $0 } }
        _ = try? await client.value
        client.cancel()
        await peer.stop()
    }
}
