import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
@testable import RealtimeCore
import RealtimeTesting
import Testing

/// `send` returns only when the channel has accepted the frame: against a peer that completes the
/// upgrade and then stops reading, sends stop once the socket buffers are full, so memory stays
/// bounded whatever the application tries to send (the flush coalescing holds flushes, never writes).
@Suite(.timeLimit(.minutes(1))) struct WebSocketBackpressureTests {
    @Test func sendsStallAgainstAPeerThatStopsReading() async throws {
        let server = try await RawUpgradePeer.start(then: .stall)
        defer { Task { await server.stop() } }
        let completed = NIOLockedValueBox(0)
        let attempts = 4000  // 4,000 x 64 KiB = 250 MiB, far beyond any socket buffer
        let frame = ByteBuffer(repeating: 0x5A, count: 64 * 1024)
        let sender = Task {
            try await WebSocketTransport.connect(
                to: "ws://127.0.0.1:\(server.port)/", configuration: WebSocketConfiguration(autoPing: nil, closeTimeout: .milliseconds(200))
            ) { connection in
                for _ in 0..<attempts {
                    try await connection.send(binary: frame)
                    completed.withLockedValue { $0 += 1 }
                }
            }
        }
        // Wait for the first accepted frame (the connect can take seconds on a loaded CI machine,
        // which this loop once mistook for "no progress"), then until the sends stop making progress.
        try await waitUntil("the first frame was accepted", limit: .seconds(30)) { completed.withLockedValue { $0 } > 0 }
        // "No more progress" is an absence: the count is sampled until it stops moving.
        var last = -1
        var now = completed.withLockedValue { $0 }
        while now != last {
            last = now
            try await Task.sleep(for: .milliseconds(500))  // sampling an absence (see above)
            now = completed.withLockedValue { $0 }
        }
        sender.cancel()
        _ = await sender.result
        #expect(now > 0, "some frames fit in the socket buffers")
        #expect(now < attempts)
        #expect(now * 64 * 1024 < 64 << 20, "\(now) frames of 64 KiB were accepted by a peer that reads nothing")
    }
}
