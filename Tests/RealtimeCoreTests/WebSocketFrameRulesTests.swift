import NIOConcurrencyHelpers
import NIOCore
@testable import RealtimeCore
import RealtimeTesting
import Testing

/// The frame protocol of RFC 6455 (sections 5 and 7) as the client holds a server to it: each case
/// is the raw frames a server sends after the 101, what the application receives, how the
/// connection ends (the typed error or the server's close code), and the close code the client
/// answers with. A peer that follows no library's habits sends them (`RawUpgradePeer`).
@Suite(.timeLimit(.minutes(1))) struct WebSocketFrameRulesTests {
    struct Case: Sendable, CustomTestStringConvertible {
        let name: String
        let frames: [UInt8]
        var maxMessageSize = 1 << 20
        /// What the application reads, text or "bin:" and the bytes' count.
        let received: [String]
        /// The error the connection ends with (nil: it ends normally).
        let error: RealtimeError.Code?
        /// The close code of the error, or of the normal end.
        let closeCode: UInt16?
        /// The close code the client answers with.
        let clientClose: UInt16?
        /// Other frames the client must send (opcode, payload), in order, before its close.
        var clientSends: [(opcode: UInt8, payload: [UInt8])] = []

        var testDescription: String { name }
    }

    static let close1000: [UInt8] = [0x88, 2, 0x03, 0xE8]
    static func text(_ string: String, fin: Bool = true, opcode: UInt8 = 1) -> [UInt8] {
        let bytes = Array(string.utf8)
        return [(fin ? 0x80 : 0) | opcode, UInt8(bytes.count)] + bytes
    }

    static let cases: [Case] = [
        Case(name: "a whole text message, then a normal close", frames: text("hi") + close1000,
             received: ["hi"], error: nil, closeCode: 1000, clientClose: 1000),
        Case(name: "a binary message", frames: [0x82, 3, 1, 2, 3] + close1000,
             received: ["bin:3"], error: nil, closeCode: 1000, clientClose: 1000),
        Case(name: "fragments are reassembled", frames: text("he", fin: false) + text("l", fin: false, opcode: 0) + text("lo", opcode: 0) + close1000,
             received: ["hello"], error: nil, closeCode: 1000, clientClose: 1000),
        Case(name: "a ping between fragments is answered with its payload", frames: text("a", fin: false) + [0x89, 2] + Array("hi".utf8) + text("b", opcode: 0) + close1000,
             received: ["ab"], error: nil, closeCode: 1000, clientClose: 1000, clientSends: [(0xA, Array("hi".utf8))]),
        Case(name: "a close frame without a code ends normally (1005)", frames: [0x88, 0],
             received: [], error: nil, closeCode: 1005, clientClose: 1000),
        Case(name: "an application close code surfaces as webSocketClosed", frames: [0x88, 4, 0x0F, 0xA0] + Array("no".utf8),
             received: [], error: .webSocketClosed, closeCode: 4000, clientClose: 1000),
        Case(name: "a close code that may not be sent is answered with 1002", frames: [0x88, 2, 0x03, 0xE7],
             received: [], error: .webSocketClosed, closeCode: 999, clientClose: 1002),
        Case(name: "a close frame of one byte is answered with 1002", frames: [0x88, 1, 0x03],
             received: [], error: .webSocketClosed, closeCode: 1002, clientClose: 1002),
        Case(name: "a close reason that is not UTF-8 is answered with 1007", frames: [0x88, 4, 0x03, 0xE8, 0xC3, 0x28],
             received: [], error: nil, closeCode: 1000, clientClose: 1007),
        Case(name: "a reserved bit without an extension fails with 1002", frames: text("ok") + [0xC1, 1, 0x61],
             received: ["ok"], error: .protocolViolation, closeCode: 1002, clientClose: 1002),
        Case(name: "a reserved opcode fails with 1002", frames: [0x83, 0],
             received: [], error: .protocolViolation, closeCode: 1002, clientClose: 1002),
        Case(name: "a continuation outside a message fails with 1002", frames: text("a", opcode: 0),
             received: [], error: .protocolViolation, closeCode: 1002, clientClose: 1002),
        Case(name: "a new message before the last one ended fails with 1002", frames: text("a", fin: false) + text("b"),
             received: [], error: .protocolViolation, closeCode: 1002, clientClose: 1002),
        Case(name: "text that is not UTF-8 fails with 1007", frames: [0x81, 2, 0xC3, 0x28],
             received: [], error: .invalidUTF8, closeCode: 1007, clientClose: 1007),
        Case(name: "a message growing past maxMessageSize fails with 1009", frames: text("12345", fin: false) + text("67890", opcode: 0),
             maxMessageSize: 8, received: [], error: .messageTooLarge, closeCode: 1009, clientClose: 1009),
        Case(name: "a frame larger than the limit is refused before it is read, with 1009", frames: [0x82, 126, 0x00, 200] + [UInt8](repeating: 0, count: 200),
             maxMessageSize: 8, received: [], error: .messageTooLarge, closeCode: 1009, clientClose: 1009),
        Case(name: "a control frame longer than 125 bytes fails with 1002", frames: text("ok") + [0x89, 126, 0x00, 126] + [UInt8](repeating: 0, count: 126),
             received: ["ok"], error: .protocolViolation, closeCode: 1002, clientClose: 1002),
        Case(name: "a fragmented control frame fails with 1002", frames: text("ok") + [0x09, 0],
             received: ["ok"], error: .protocolViolation, closeCode: 1002, clientClose: 1002),
        Case(name: "a masked frame from the server fails with 1002 (section 5.1)", frames: text("ok") + [0x81, 0x82, 1, 2, 3, 4, 0x6F ^ 1, 0x6B ^ 2],
             received: ["ok"], error: .protocolViolation, closeCode: 1002, clientClose: 1002),
        Case(name: "a 64-bit length with its top bit set fails with 1002", frames: [0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 1],
             received: [], error: .protocolViolation, closeCode: 1002, clientClose: 1002),
        Case(name: "lengths in 16 and 64 bits", frames: [0x81, 126, 0x01, 0x2C] + Array(repeating: 0x61, count: 300)
                + [0x82, 127, 0, 0, 0, 0, 0, 0, 0x01, 0x00] + Array(repeating: 7, count: 256) + close1000,
             received: [String(repeating: "a", count: 300), "bin:256"], error: nil, closeCode: 1000, clientClose: 1000),
        Case(name: "text beyond ASCII arrives as sent", frames: text("h\u{E9}llo \u{2713} \u{1F600}") + close1000,
             received: ["h\u{E9}llo \u{2713} \u{1F600}"], error: nil, closeCode: 1000, clientClose: 1000),
        Case(name: "a truncated four-byte sequence fails with 1007, though its replacement has its length", frames: [0x81, 4, 0xF0, 0x90, 0x80, 0x41],
             received: [], error: .invalidUTF8, closeCode: 1007, clientClose: 1007),
        Case(name: "an encoded surrogate fails with 1007", frames: [0x81, 3, 0xED, 0xA0, 0x80],
             received: [], error: .invalidUTF8, closeCode: 1007, clientClose: 1007),
    ]

    @Test(arguments: cases)
    func aServerIsHeldToTheFrameRules(_ rule: Case) async throws {
        let peer = try await RawUpgradePeer.start(then: .send(rule.frames))
        let received = NIOLockedValueBox<[String]>([])
        var outcome: Result<WebSocketCloseInfo?, any Error>
        do {
            let info = try await WebSocketTransport.connect(
                to: "ws://127.0.0.1:\(peer.port)/",
                configuration: WebSocketConfiguration(maxMessageSize: rule.maxMessageSize, autoPing: nil, closeTimeout: .seconds(5))
            ) { connection in
                for try await message in connection.inbound {
                    switch message {
                    case .text(let text): received.withLockedValue { $0.append(text) }
                    case .binary(let data): received.withLockedValue { $0.append("bin:\(data.readableBytes)") }
                    }
                }
            }
            outcome = .success(info)
        } catch {
            outcome = .failure(error)
        }
        #expect(received.withLockedValue { $0 } == rule.received)
        switch outcome {
        case .success(let info):
            #expect(rule.error == nil, "ended normally, expected \(String(describing: rule.error))")
            #expect(info?.code == rule.closeCode)
        case .failure(let error):
            let error = try #require(error as? RealtimeError, "\(error)")
            #expect(error.code == rule.error, "\(error)")
            #expect(error.closeCode == rule.closeCode, "\(error)")
        }
        try await waitUntil("the client's close frame reached the peer", limit: .seconds(10)) { peer.clientCloseCode != nil }
        #expect(peer.clientCloseCode == rule.clientClose)
        let sent = peer.clientFrames.filter { $0.opcode != 8 }
        #expect(sent.map(\.opcode) == rule.clientSends.map(\.opcode))
        #expect(sent.map(\.payload) == rule.clientSends.map(\.payload))
        await peer.stop()
    }
}

/// A consumer that does not keep up holds the connection's reading, not an ever larger buffer:
/// the server's writes back up into its own socket, and every message arrives, in order, once the
/// consumer reads again.
@Suite(.timeLimit(.minutes(2))) struct WebSocketInboundBackpressureTests {
    @Test func aSlowConsumerStopsReadingAndLosesNothing() async throws {
        let count = 2_000
        let size = 16 * 1024  // 2,000 x 16 KiB = 31 MiB, far beyond the socket buffers
        var frames: [UInt8] = []
        frames.reserveCapacity(count * (size + 4))
        for index in 0..<count {
            frames += [0x82, 126, UInt8(size >> 8), UInt8(size & 0xFF)]
            frames += [UInt8](repeating: UInt8(index % 251), count: size)
        }
        let peer = try await RawUpgradePeer.start(then: .send(frames))
        let reading = NIOLockedValueBox(false)
        let arrived = NIOLockedValueBox<[UInt8]>([])
        let client = Task {
            try await WebSocketTransport.connect(
                to: "ws://127.0.0.1:\(peer.port)/", configuration: WebSocketConfiguration(autoPing: nil, closeTimeout: .milliseconds(500))
            ) { connection in
                var iterator = connection.inbound.makeAsyncIterator()
                try await waitUntil("the test lets the consumer read", limit: .seconds(30)) { reading.withLockedValue { $0 } }
                while arrived.withLockedValue({ $0.count }) < count, let message = try await iterator.next() {
                    guard case .binary(let data) = message else { continue }
                    #expect(data.readableBytes == size)
                    arrived.withLockedValue { $0.append(data.readableBytesView.first ?? 0) }
                }
            }
        }
        // The peer wrote everything at once: what the client did not read waits in the peer's own
        // outbound buffer, which tells how much the client took in while nobody consumed.
        try await waitUntil("the peer's writes backed up", limit: .seconds(20)) { (peer.pendingOutboundBytes ?? 0) > 0 }
        var last = -1
        var pending = peer.pendingOutboundBytes ?? 0
        while pending != last {
            last = pending
            try await Task.sleep(for: .milliseconds(300))  // sampling until the client stops taking
            pending = peer.pendingOutboundBytes ?? 0
        }
        // What left the peer's channel: the kernel's socket buffers on both sides (a receive buffer
        // nobody reads does not grow; the peer's send buffer grows up to tcp_wmem's maximum, 4 MiB by
        // default) and what the client holds: 16 messages and one read. Without the held reads it
        // would be all 31 MiB.
        let taken = frames.count - pending
        #expect(taken < 16 << 20, "the client took in \(taken) bytes while its consumer read nothing")
        reading.withLockedValue { $0 = true }
        _ = try? await client.value
        let order = arrived.withLockedValue { $0 }
        #expect(order.count == count)
        #expect(order == (0..<count).map { UInt8($0 % 251) })
        await peer.stop()
    }
}
