import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
@testable import RealtimeCore
import RealtimeTesting
import Testing

/// An event stream's own connection over real sockets: what a server's malformed answer is called,
/// where credentials go on a redirect, and pinned keys checked on the stream's own handshake.
@Suite(.serialized, .timeLimit(.minutes(1))) final class EventStreamConnectionTests {
    static let sse: [(String, String)] = [("Content-Type", "text/event-stream")]
    let certificates: TestCertificates

    init() async throws {
        certificates = try await TestCertificates.make()
    }

    deinit { certificates.remove() }

    /// A TCP peer that answers every request with `answer` and then closes (or, with `close`
    /// false, keeps the connection open).
    final class RawAnswerPeer: Sendable {
        let port: Int
        private let channel: any Channel

        private init(port: Int, channel: any Channel) {
            self.port = port
            self.channel = channel
        }

        static func start(answer: String, close: Bool = true) async throws -> RawAnswerPeer {
            let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .childChannelInitializer { child in
                    child.eventLoop.makeCompletedFuture { try child.pipeline.syncOperations.addHandler(Answer(answer, close: close)) }
                }
                .bind(host: "127.0.0.1", port: 0).get()
            return RawAnswerPeer(port: channel.localAddress!.port!, channel: channel)
        }

        func stop() async { try? await channel.close() }

        final class Answer: ChannelInboundHandler {
            typealias InboundIn = ByteBuffer
            typealias OutboundOut = ByteBuffer
            let answer: String
            let close: Bool
            var request = ""
            var answered = false
            init(_ answer: String, close: Bool) {
                self.answer = answer
                self.close = close
            }

            func channelRead(context: ChannelHandlerContext, data: NIOAny) {
                request += String(buffer: unwrapInboundIn(data))
                guard !answered, request.contains("\r\n\r\n") else { return }
                answered = true
                let done = context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: answer)))
                if close { done.whenComplete { [context = NIOLoopBound(context, eventLoop: context.eventLoop)] _ in context.value.close(promise: nil) } }
            }
        }
    }

    func run(_ url: String, tls: TLSOptions = .default, headers: HTTPHeaders = [:]) async throws -> [String] {
        let events = NIOLockedValueBox<[String]>([])
        try await EventStream.run(
            HTTPRequestSpec(url: url, headers: headers, tls: tls, headTimeout: .seconds(10)), runtime: RealtimeRuntime(proxy: .none),
            onHead: { head in
                guard head.status == .ok else { return .refuse { _ in RealtimeError.badStatus(head.status, url: url) } }
                return .accept
            },
            onOutputs: { outputs in
                for case .event(let event) in outputs { events.withLockedValue { $0.append(event.data) } }
                return true
            })
        return events.withLockedValue { $0 }
    }

    @Test(arguments: [
        ("SSH-2.0-OpenSSH_9.2\r\n\r\n", RealtimeError.Code.protocolViolation),
        ("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", .protocolViolation),
        ("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n40\r\ndata: cut\n\n", .connectionClosed),
        ("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Le", .connectionClosed),
    ])
    func aMalformedOrCutAnswerFailsWithItsCode(answer: String, code: RealtimeError.Code) async throws {
        let peer = try await RawAnswerPeer.start(answer: answer)
        defer { Task { await peer.stop() } }
        let error = await #expect(throws: RealtimeError.self) { _ = try await self.run("http://127.0.0.1:\(peer.port)/events") }
        #expect(error?.code == code, "\(String(describing: error))")
    }

    /// A body without length or chunking ends with the connection, as HTTP/1.0 servers end it.
    @Test func aBodyUntilTheCloseEndsTheStream() async throws {
        let peer = try await RawAnswerPeer.start(answer: "HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: one\n\ndata: two\n\n")
        defer { Task { await peer.stop() } }
        #expect(try await run("http://127.0.0.1:\(peer.port)/events") == ["one", "two"])
    }

    /// What Reliability.md promises of a stream's memory: after a burst, a quiet stream reads into
    /// one 512-byte buffer again, one read per wake-up (so the channel keeps one buffer of that size,
    /// `ReceiveBufferAllocatorTests`). The burst must have grown the buffer, or the test proves nothing.
    @Test func aQuietStreamReadsInto512BytesAgainAfterABurst() async throws {
        let feed = ChunkFeed()
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        server.route("/events") { _ in .init(headers: Self.sse, body: .feed(feed)) }
        let (received, continuation) = AsyncStream<String>.makeStream()
        let stream = try EventStream.open(
            HTTPRequestSpec(url: server.baseURL + "/events"), runtime: RealtimeRuntime(proxy: .none),
            onHead: { _ in .accept },
            onOutputs: { outputs in
                for case .event(let event) in outputs { continuation.yield(event.data) }
                return true
            })
        defer { stream.cancel() }
        var events = received.makeAsyncIterator()
        feed.send("data: hello\n\n")
        #expect(await events.next() == "hello")
        let before = try #require(try await stream.receiveBuffer())
        #expect(before.nextSize == 512 && before.readsPerWakeUp == 1, "\(before)")

        let large = String(repeating: "x", count: 128 * 1024)
        for _ in 0..<4 { feed.send("data: \(large)\n\n") }
        for _ in 0..<4 { #expect(await events.next()?.utf8.count == large.utf8.count) }
        let grown = try #require(try await stream.receiveBuffer())
        #expect(grown.nextSize >= 16 * 1024, "the burst's reads grew the buffer: \(grown)")

        // Quiet again: small events, each read on its own (the next is written once the last arrived).
        for index in 0..<20 {
            feed.send("data: \(index)\n\n")
            #expect(await events.next() == "\(index)")
        }
        let after = try #require(try await stream.receiveBuffer())
        #expect(after.nextSize == 512 && after.readsPerWakeUp == 1, "\(after)")
        feed.finish()
    }

    /// A refused response whose body neither ends nor reaches 512 bytes (a server that says 401,
    /// promises 1,000 bytes and sends 20) fails with the refusal and what came, within the
    /// excerpt's wait, not at the test's time limit.
    @Test func aRefusedBodyThatStallsEndsWithItsExcerpt() async throws {
        let peer = try await RawAnswerPeer.start(
            answer: "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"error\":\"expired\"", close: false)
        defer { Task { await peer.stop() } }
        let error = await #expect(throws: RealtimeError.self) {
            try await EventStream.run(
                HTTPRequestSpec(url: "http://127.0.0.1:\(peer.port)/events", headTimeout: .seconds(10)), runtime: RealtimeRuntime(proxy: .none),
                onHead: { head in .refuse { excerpt in RealtimeError.badStatus(head.status, url: "http://127.0.0.1/events", body: excerpt) } },
                onOutputs: { _ in true })
        }
        #expect(error?.code == .badStatus)
        #expect(error?.serverMessage == "{\"error\":\"expired\"", "\(String(describing: error))")
    }

    /// `Authorization` and `Cookie` follow a redirect within the origin, not to another one.
    @Test func credentialsStayWithTheirOriginOnARedirect() async throws {
        let other = try await ScriptedHTTPServer.start()
        defer { Task { await other.stop() } }
        other.route("/events") { _ in .init(headers: Self.sse, body: .bytes(ByteBuffer(string: "data: there\n\n"))) }
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        server.route("/same") { _ in ScriptedResponse(status: 302, headers: [("Location", "/events")]) }
        server.route("/away") { _ in ScriptedResponse(status: 307, headers: [("Location", other.baseURL + "/events")]) }
        server.route("/events") { _ in .init(headers: Self.sse, body: .bytes(ByteBuffer(string: "data: here\n\n"))) }
        let credentials: HTTPHeaders = ["Authorization": "Bearer secret", "Cookie": "session=1", "X-Room": "a"]
        #expect(try await run(server.baseURL + "/same", headers: credentials) == ["here"])
        #expect(server.requests(to: "/events").first?.headers["authorization"] == "Bearer secret")
        #expect(try await run(server.baseURL + "/away", headers: credentials) == ["there"])
        let moved = try #require(other.requests(to: "/events").first)
        #expect(moved.headers["authorization"] == nil)
        #expect(moved.headers["cookie"] == nil)
        #expect(moved.headers["x-room"] == "a")
    }

    @Test func aRedirectLoopEndsWithATypedError() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        server.route("/a") { _ in ScriptedResponse(status: 302, headers: [("Location", "/b")]) }
        server.route("/b") { _ in ScriptedResponse(status: 302, headers: [("Location", "/a")]) }
        let error = await #expect(throws: RealtimeError.self) { _ = try await self.run(server.baseURL + "/a") }
        #expect(error?.code == .connectFailed)
        #expect(error?.detail.contains("cycle") == true, "\(String(describing: error))")
        #expect(server.requests.count == 2)
    }

    /// Pinned keys are checked on the stream's own handshake: the right pin opens the stream, a
    /// wrong one fails it before any request byte is sent.
    @Test func pinnedKeysAreCheckedOnTheStreamsHandshake() async throws {
        let tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMFile(certificates.server.certificatePath).map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(file: certificates.server.keyPath, format: .pem)))
        let server = try await ScriptedHTTPServer.start(tls: tls)
        defer { Task { await server.stop() } }
        server.route("/events") { _ in .init(headers: Self.sse, body: .bytes(ByteBuffer(string: "data: pinned\n\n"))) }
        let certificate = try #require(try NIOSSLCertificate.fromPEMFile(certificates.server.certificatePath).first)
        let pin = try TLSPinning.spkiSHA256(of: certificate)
        var right = TLSOptions(trustRoots: .pemFile(certificates.ca.certificatePath))
        right.pinnedPublicKeySHA256 = [pin]
        #expect(try await run(server.baseURL + "/events", tls: right) == ["pinned"])
        var wrong = right
        wrong.pinnedPublicKeySHA256 = [Data(repeating: 7, count: 32).base64EncodedString()]
        let error = await #expect(throws: RealtimeError.self) { _ = try await self.run(server.baseURL + "/events", tls: wrong) }
        #expect(error?.code == .certificatePinMismatch, "\(String(describing: error))")
        #expect(server.requests(to: "/events").count == 1, "the wrong pin sent no request")
    }
}
