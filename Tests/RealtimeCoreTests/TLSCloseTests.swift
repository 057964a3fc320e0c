import Foundation
import NIOConcurrencyHelpers
import NIOSSL
import RealtimeCore
import RealtimeTesting
import Testing

/// A wss:// connection behind a TLS-terminating proxy: the peer answers the close frame, then closes
/// TCP without answering our close_notify (as nginx does). The connection must end at once, not
/// after swift-nio-ssl's 5 s shutdown timeout (which a service stopping on SIGTERM paid per socket).
@Suite(.timeLimit(.minutes(1))) struct TLSCloseTests {
    @Test func aPeerThatDropsTCPAfterOurCloseEndsTheConnectionAtOnce() async throws {
        let certificates = try await TestCertificates.make()
        defer { certificates.remove() }
        let tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMFile(certificates.server.certificatePath).map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(file: certificates.server.keyPath, format: .pem)))
        let peer = try await RawUpgradePeer.start(then: .answerCloseThenDropTCP, tls: tls)
        defer { Task { await peer.stop() } }
        // The close handshake's own timeout is 3 s, not the TLS shutdown's 5 s, so a slow close
        // says which one it waited for.
        let configuration = WebSocketConfiguration(
            connectTimeout: .seconds(5), closeTimeout: .seconds(3), tls: TLSOptions(trustRoots: .pemFile(certificates.ca.certificatePath)))
        var longest = Duration.zero
        for _ in 0..<5 {
            // Only the close is timed (from close() to the connection's end), not the connect.
            let closeStarted = NIOLockedValueBox<ContinuousClock.Instant?>(nil)
            _ = try? await WebSocketTransport.connect(to: "wss://127.0.0.1:\(peer.port)/", configuration: configuration) { connection in
                closeStarted.withLockedValue { $0 = .now }
                try await connection.close()
                for try await _ in connection.inbound {}
            }
            if let started = closeStarted.withLockedValue({ $0 }) { longest = max(longest, ContinuousClock.now - started) }
        }
        // The TLS shutdown timeout is 5 s: a close that waited for it takes at least that; a close
        // that did not takes milliseconds, even on a loaded machine.
        #expect(longest < .milliseconds(2_500), "a close took \(longest) (about 3 s: the peer did not answer the close frame; about 5 s: the TLS shutdown timeout)")
    }
}
