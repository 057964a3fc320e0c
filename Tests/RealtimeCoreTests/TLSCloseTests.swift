import Foundation
import NIOConcurrencyHelpers
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
