import Foundation
import RealtimeCore
import RealtimeTesting
import SignalRClient
import Testing

// TLS through the compat's HttpConnectionOptions.tls, against our SignalR server over real TLS
// (certificates made by openssl for this run): the option's trust roots are used for negotiate and
// the WebSocket; without it the system's roots refuse the test CA's certificate.
@Suite(.serialized, .timeLimit(.minutes(2)))
final class SignalRClientTLSTests {
    let certificates: TestCertificates

    init() async throws {
        certificates = try await TestCertificates.make()
    }

    deinit { certificates.remove() }

    @Test("HttpConnectionOptions.tls sets the trust roots; without it the test CA is not trusted")
    func tlsOptionSetsTrustRoots() async throws {
        var serverOptions = SignalRTestServer.Options()
        serverOptions.tls = try certificates.server.serverConfiguration()
        let server = try await SignalRTestServer.start(options: serverOptions)
        #expect(server.url.hasPrefix("https://"))

        let trusting = HttpConnectionOptions()
        trusting.tls = TLSOptions(trustRoots: .pemFile(certificates.ca.certificatePath))
        let connection = HubConnectionBuilder().withUrl(url: server.url, options: trusting).build()
        try await connection.start()
        #expect(connection.state() == .Connected)
        await connection.stop()

        let untrusting = HubConnectionBuilder().withUrl(url: server.url).build()
        await #expect(throws: (any Error).self) { try await untrusting.start() }
        await server.stop()
    }
}
