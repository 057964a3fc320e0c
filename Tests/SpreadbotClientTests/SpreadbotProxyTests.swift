import Foundation
import NIOSSL
import RealtimeCore
import RealtimeTesting
import SpreadbotClient
import Testing

/// Spreadbot through real proxies (tinyproxy with and without credentials, dante's SOCKS5) over
/// https and wss: every stream transport, sends, REST and the token refresh, each asserted from
/// the proxy's log.
@Suite(.serialized, .timeLimit(.minutes(3)))
final class SpreadbotProxyTests {
    let certificates: TestCertificates

    init() async throws {
        certificates = try await TestCertificates.make()
    }

    deinit { certificates.remove() }

    @Test(arguments: [ProxyProcess.Kind.tinyproxy(), .tinyproxy(username: "bot", password: "pw"), .dante])
    func streamRESTAndRefreshGoThroughARealProxy(_ kind: ProxyProcess.Kind) async throws {
        let proxy = try await ProxyProcess.start(kind)
        defer { Task { await proxy.stop() } }
        var options = SpreadbotTestServer.Options()
        options.tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMFile(certificates.server.certificatePath).map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(file: certificates.server.keyPath, format: .pem)))
        var runtime = RealtimeRuntime()
        runtime.proxy = proxy.configuration
        for transport in [SpreadbotTransport.webSocket, .serverSentEvents, .polling] {
            // A server each: the refresh rotates the refresh token, which the next client would not have.
            let server = try await SpreadbotTestServer.start(options: options)
            server.setResource("/me", json: #"{"proxied":true}"#)
            var configuration = spreadbotConfiguration(server, runtime: runtime)
            configuration.transports = [transport]
            configuration.tls = TLSOptions(trustRoots: .pemFile(certificates.ca.certificatePath))
            let client = Spreadbot(configuration: configuration)
            let recorder = Recorder(client)
            client.establishConnection(path: "room")
            await eventually("connected over \(transport) through \(kind)") { client.state == .connected }
            server.publish("in \(transport)", to: "room")
            try await client.send("out \(transport)")
            await eventually("both ways over \(transport): \(recorder.texts) \(server.received(on: "room"))") {
                recorder.texts == ["in \(transport)"] && server.received(on: "room").contains(.text("out \(transport)"))
            }
            server.expireTokens()
            #expect(try await client.rest.getData(path: "me").json()["proxied"] == true)
            client.closeConnection()
            await client.waitUntilClosed()
            #expect(server.refreshCount == 1, "the expired token was refreshed through the proxy")
            try await proxy.waitForTarget(port: server.port)
            await server.stop()
        }
    }
}
