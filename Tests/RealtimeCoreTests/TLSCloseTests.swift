import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL
import RealtimeCore
import RealtimeTesting
import Testing

/// A wss:// connection behind a TLS-terminating proxy: the peer answers the close frame, then closes
/// TCP without answering our close_notify (as nginx does). The connection must end at once, not
/// after swift-nio-ssl's 5 s shutdown timeout (which a service stopping on SIGTERM paid per socket).
@Suite(.timeLimit(.minutes(3))) struct TLSCloseTests {
    @Test func aPeerThatDropsTCPAfterOurCloseEndsTheConnectionAtOnce() async throws {
        let certificates = try await TestCertificates.make()
        defer { certificates.remove() }
        let tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMFile(certificates.server.certificatePath).map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(file: certificates.server.keyPath, format: .pem)))
        let peer = try await RawUpgradePeer.start(then: .answerCloseThenDropTCP, tls: tls)
        defer { Task { await peer.stop() } }
        // Both timeouts the close could wait out (the close handshake's and the TLS shutdown's) are
        // 60 s here, so a close that waited is told from a slow machine by a wide margin: the
        // shortcut ends a close in milliseconds, in seconds on two busy cores.
        var tlsOptions = TLSOptions(trustRoots: .pemFile(certificates.ca.certificatePath))
        tlsOptions.shutdownTimeout = .seconds(60)
        let configuration = WebSocketConfiguration(connectTimeout: .seconds(30), closeTimeout: .seconds(60), tls: tlsOptions)
        var longest = Duration.zero
        for _ in 0..<5 where longest < .seconds(30) {
            // Only the close is timed (from close() to the connection's end), not the connect.
            let closeStarted = NIOLockedValueBox<ContinuousClock.Instant?>(nil)
            _ = try? await WebSocketTransport.connect(to: "wss://127.0.0.1:\(peer.port)/", configuration: configuration) { connection in
                closeStarted.withLockedValue { $0 = .now }
                try await connection.close()
                for try await _ in connection.inbound {}
            }
            if let started = closeStarted.withLockedValue({ $0 }) { longest = max(longest, ContinuousClock.now - started) }
        }
        #expect(longest < .seconds(30), "a close took \(longest): it waited for a 60 s timeout (the peer's close frame or its close_notify)")
    }
}

/// An https event stream whose server never answers our close_notify (it is busy writing the
/// response and reads nothing more, as nginx in front of a stream does): a close we start ends the
/// connection at once, as over plain http, not after a wait for the server's close_notify
/// (swift-nio-ssl's default, 5 s, which a SignalR `stop()` over SSE paid behind nginx).
@Suite(.timeLimit(.minutes(3))) struct TLSStreamCloseTests {
    /// Answers the request with an event-stream head and one event, then stops reading: our
    /// close_notify is never read, so never answered.
    final class DeafStreamPeer: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer
        private var request = ""

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            request += String(buffer: unwrapInboundIn(data))
            guard request.contains("\r\n\r\n") else { return }
            let answer = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\r\ndata: hello\n\n"
            context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: answer)), promise: nil)
            context.channel.setOption(ChannelOptions.autoRead, value: false).whenComplete { _ in }
        }
    }

    @Test func aStreamWeCloseEndsWithoutWaitingForTheServersCloseNotify() async throws {
        let certificates = try await TestCertificates.make()
        defer { certificates.remove() }
        let sslContext = try NIOSSLContext(configuration: try certificates.server.serverConfiguration())
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { child in
                child.eventLoop.makeCompletedFuture {
                    try child.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: sslContext))
                    try child.pipeline.syncOperations.addHandler(DeafStreamPeer())
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        defer { server.close(promise: nil) }
        // The default options: what a user gets.
        let tls = TLSOptions(trustRoots: .pemFile(certificates.ca.certificatePath))
        // A close that waited for the server's close_notify takes 5 s or more; one that did not
        // takes milliseconds (seconds on two busy cores).
        var longest = Duration.zero
        for _ in 0..<3 {
            let (events, continuation) = AsyncStream<String>.makeStream()
            let stream = try EventStream.open(
                HTTPRequestSpec(url: "https://127.0.0.1:\(server.localAddress!.port!)/events", tls: tls, headTimeout: .seconds(30)),
                runtime: RealtimeRuntime(proxy: .none),
                onHead: { _ in .accept },
                onOutputs: { outputs in
                    for case .event(let event) in outputs { continuation.yield(event.data) }
                    return true
                })
            var iterator = events.makeAsyncIterator()
            #expect(await iterator.next() == "hello")
            let closeStarted = ContinuousClock.now
            stream.cancel()
            _ = try? await stream.finished()
            longest = max(longest, ContinuousClock.now - closeStarted)
        }
        #expect(longest < .milliseconds(4500), "a close took \(longest): it waited for the server's close_notify")
    }
}
