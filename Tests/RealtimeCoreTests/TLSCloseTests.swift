import Foundation
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
        let configuration = WebSocketConfiguration(
            connectTimeout: .seconds(5), tls: TLSOptions(trustRoots: .pemFile(certificates.ca.certificatePath)))
        var longest = Duration.zero
        for _ in 0..<5 {
            let start = ContinuousClock.now
            _ = try? await WebSocketTransport.connect(to: "wss://127.0.0.1:\(peer.port)/", configuration: configuration) { connection in
                try await connection.close()
                for try await _ in connection.inbound {}
            }
            longest = max(longest, ContinuousClock.now - start)
        }
        // The TLS shutdown timeout is 5 s: any close that waited for it shows here (loaded machines
        // take well under a second for a loopback connect and close).
        #expect(longest < .seconds(3), "a close took \(longest)")
    }
}
