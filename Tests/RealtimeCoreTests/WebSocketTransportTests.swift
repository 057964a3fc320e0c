#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
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

    /// A message over maxMessageSize is refused with close 1009 + messageTooLarge, whether it comes
    /// as one frame (the frame decoder refuses it before reading it into memory) or in fragments.
    @Test(arguments: [(1024, 1500), (1024, 5000), (1 << 20, 3 << 20)])
    func oversizedMessagesFailWithMessageTooLarge(limit: Int, size: Int) async throws {
        let server = try await WebSocketEchoServer.start()
        defer { Task { await server.stop() } }
        let error = await #expect(throws: RealtimeError.self) {
            try await WebSocketTransport.connect(
                to: server.webSocketBaseURL, configuration: WebSocketConfiguration(maxMessageSize: limit)
            ) { connection in
                try await connection.send(text: "!send \(size)")
                for try await _ in connection.inbound {}
            }
        }
        #expect(error?.code == .messageTooLarge, "\(String(describing: error))")
        #expect(error?.closeCode == 1009)
    }

    @Test func sendsNoOriginUnlessOneIsConfigured() async throws {
        let server = try await WebSocketEchoServer.start()
        defer { Task { await server.stop() } }
        #expect(try await askServer(server.webSocketBaseURL, "!header origin") == "<none>")
        let configured = WebSocketConfiguration(origin: "https://app.example")
        #expect(try await askServer(server.webSocketBaseURL, "!header origin", configured) == "https://app.example")
    }

    @Test func theUpgradeResponseIsReadable() async throws {
        let server = try await WebSocketEchoServer.start(compression: true)
        defer { Task { await server.stop() } }
        let response = NIOLockedValueBox<WebSocketUpgradeResponse?>(nil)
        try await WebSocketTransport.connect(
            to: server.webSocketBaseURL, configuration: WebSocketConfiguration(subprotocols: ["chat.v2", "chat.v1"], compression: true)
        ) { connection in
            response.withLockedValue { $0 = connection.upgradeResponse }
            try await connection.close()
        }
        let head = try #require(response.withLockedValue { $0 })
        #expect(head.status == .switchingProtocols)
        #expect(head.subprotocol == "chat.v2")
        #expect(head.extensions == ["permessage-deflate"])
        #expect(head.headers.first(name: "sec-websocket-accept") != nil)
    }

    /// A protocol module must tell "unknown connection id" (404) from "unauthorised" (401).
    @Test(arguments: [400, 401, 403, 404, 409, 503])
    func aRefusedUpgradeIsBadStatusWithTheStatusAndBody(status: Int) async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        server.route("/hub") { _ in .text("refused: reason \(status)", status: status) }
        let error = await #expect(throws: RealtimeError.self) {
            try await WebSocketTransport.connect(to: server.webSocketBaseURL + "/hub") { _ in Issue.record("must not open") }
        }
        #expect(error?.code == .badStatus)
        #expect(error?.status?.code == UInt(status))
        #expect(error?.serverMessage == "refused: reason \(status)")
    }

    @Test func aCookieSetOnAnHTTPResponseIsSentOnTheUpgrade() async throws {
        let http = try await ScriptedHTTPServer.start()
        defer { Task { await http.stop() } }
        let webSocket = try await WebSocketEchoServer.start()
        defer { Task { await webSocket.stop() } }
        http.route("/handshake") { _ in
            ScriptedResponse(headers: [("Set-Cookie", "lb=node-7; Path=/"), ("Set-Cookie", "other=x; Path=/elsewhere")])
        }
        let cookies = CookieStore()
        _ = try await HTTPTransport.execute(HTTPRequestSpec(url: http.baseURL + "/handshake", cookies: cookies))
        #expect(cookies.count == 2)
        let sent = try await askServer(webSocket.webSocketBaseURL + "/", "!header cookie", WebSocketConfiguration(cookies: cookies))
        #expect(sent == "lb=node-7")
        #expect(try await askServer(webSocket.webSocketBaseURL + "/", "!header cookie") == "<none>")
    }

    /// Sends `command` to the echo server and returns its answer.
    func askServer(_ url: String, _ command: String, _ configuration: WebSocketConfiguration = .init()) async throws -> String? {
        let answer = NIOLockedValueBox<String?>(nil)
        try await WebSocketTransport.connect(to: url, configuration: configuration) { connection in
            try await connection.send(text: command)
            var iterator = connection.inbound.makeAsyncIterator()
            if case .text(let text) = try await iterator.next() { answer.withLockedValue { $0 = text } }
            try await connection.close()
        }
        return answer.withLockedValue { $0 }
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
        // A port bound but not listening refuses connections, and no other test's server can take
        // it meanwhile (a stopped server's port could be reused by a parallel test: a CI run once
        // got that server's 404 here).
        let closed = try RefusingPort()
        let refused = await #expect(throws: RealtimeError.self) {
            try await WebSocketTransport.connect(to: "ws://127.0.0.1:\(closed.port)/") { _ in }
        }
        #expect(refused?.code == .connectFailed)
        let invalid = await #expect(throws: RealtimeError.self) {
            try await WebSocketTransport.connect(to: "ftp://127.0.0.1/") { _ in }
        }
        #expect(invalid?.code == .invalidURL)
    }
}
