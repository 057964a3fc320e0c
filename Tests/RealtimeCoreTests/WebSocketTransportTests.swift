import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import RealtimeCore
import RealtimeTesting
import Testing

@Suite(.timeLimit(.minutes(1))) struct WebSocketTransportTests {
    @Test func echoesTextAndBinary() async throws {
        let server = try await WebSocketEchoServer.start()
        defer { Task { await server.stop() } }
        let received = NIOLockedValueBox<[RealtimeMessage]>([])
        let close = try await WebSocketTransport.connect(to: server.webSocketBaseURL + "/ws") { connection in
            try await connection.send(text: "héllo")
            try await connection.send(binary: ByteBuffer(bytes: [0, 1, 2, 255]))
            var iterator = connection.inbound.makeAsyncIterator()
            for _ in 0..<2 {
                if let message = try await iterator.next() { received.withLockedValue { $0.append(message) } }
            }
            try await connection.close()
        }
        #expect(received.withLockedValue { $0 } == [.text("héllo"), .binary(ByteBuffer(bytes: [0, 1, 2, 255]))])
        #expect(close == nil || close?.code == 1000)
    }

    @Test func sendsCustomHeadersAndNegotiatesASubprotocol() async throws {
        let server = try await WebSocketEchoServer.start()
        defer { Task { await server.stop() } }
        var configuration = WebSocketConfiguration(subprotocols: ["chat.v2", "chat.v1"])
        configuration.headers.add(name: "X-Trace", value: "abc123")
        let answers = NIOLockedValueBox<[String]>([])
        try await WebSocketTransport.connect(to: server.webSocketBaseURL, configuration: configuration) { connection in
            try await connection.send(text: "!header x-trace")
            try await connection.send(text: "!protocol")
            var iterator = connection.inbound.makeAsyncIterator()
            for _ in 0..<2 {
                if case .text(let text) = try await iterator.next() { answers.withLockedValue { $0.append(text) } }
            }
            try await connection.close()
        }
        #expect(answers.withLockedValue { $0 } == ["abc123", "chat.v2"])
    }

    @Test func permessageDeflateRoundTripsLargeMessages() async throws {
        let server = try await WebSocketEchoServer.start(compression: true)
        defer { Task { await server.stop() } }
        let text = String(repeating: "compressible ", count: 20_000)
        let echoed = NIOLockedValueBox<String?>(nil)
        try await WebSocketTransport.connect(
            to: server.webSocketBaseURL, configuration: WebSocketConfiguration(compression: true)
        ) { connection in
            try await connection.send(text: text)
            var iterator = connection.inbound.makeAsyncIterator()
            if case .text(let reply) = try await iterator.next() { echoed.withLockedValue { $0 = reply } }
            try await connection.close()
        }
        #expect(echoed.withLockedValue { $0 } == text)
    }

    @Test func applicationCloseCodesSurfaceAsTypedErrors() async throws {
        let server = try await WebSocketEchoServer.start()
        defer { Task { await server.stop() } }
        let error = await #expect(throws: RealtimeError.self) {
            try await WebSocketTransport.connect(to: server.webSocketBaseURL) { connection in
                try await connection.send(text: "!close 4001 kicked out")
                for try await _ in connection.inbound {}
            }
        }
        #expect(error?.code == .webSocketClosed)
        #expect(error?.closeCode == 4001)
        #expect(error?.serverMessage == "kicked out")
    }

    /// Up to twice maxMessageSize arrives and is refused with close 1009 + messageTooLarge; a single
    /// frame beyond that never reaches memory: the frame decoder drops the connection (1006).
    @Test(arguments: [
        (1500, RealtimeError.Code.messageTooLarge, UInt16(1009)),
        (5000, RealtimeError.Code.connectionClosed, UInt16(1006)),
    ])
    func oversizedMessagesFailWithATypedError(size: Int, code: RealtimeError.Code, closeCode: UInt16) async throws {
        let server = try await WebSocketEchoServer.start()
        defer { Task { await server.stop() } }
        let error = await #expect(throws: RealtimeError.self) {
            try await WebSocketTransport.connect(
                to: server.webSocketBaseURL, configuration: WebSocketConfiguration(maxMessageSize: 1024)
            ) { connection in
                try await connection.send(text: "!send \(size)")
                for try await _ in connection.inbound {}
            }
        }
        #expect(error?.code == code, "\(String(describing: error))")
        #expect(error?.closeCode == closeCode)
    }

    @Test func aServerThatNeverAnswersTheUpgradeTimesOut() async throws {
        let silent = try await SilentTCPServer.start()
        defer { Task { await silent.stop() } }
        let error = await #expect(throws: RealtimeError.self) {
            try await WebSocketTransport.connect(
                to: "ws://127.0.0.1:\(silent.port)/", configuration: WebSocketConfiguration(connectTimeout: .milliseconds(300))
            ) { _ in Issue.record("must not connect") }
        }
        #expect(error?.code == .timeout)
    }

    @Test func refusedConnectionsAndBadURLsAreTyped() async throws {
        let silent = try await SilentTCPServer.start()
        let port = silent.port
        await silent.stop()
        let refused = await #expect(throws: RealtimeError.self) {
            try await WebSocketTransport.connect(to: "ws://127.0.0.1:\(port)/") { _ in }
        }
        #expect(refused?.code == .connectFailed)
        let invalid = await #expect(throws: RealtimeError.self) {
            try await WebSocketTransport.connect(to: "ftp://127.0.0.1/") { _ in }
        }
        #expect(invalid?.code == .invalidURL)
    }
}
