import Foundation
import NIOHTTP1
import RealtimeCore
import RealtimeTesting
import SignalRHub
import Testing

/// SignalR through real proxies (tinyproxy with and without credentials, dante's SOCKS5): negotiate
/// and every transport (WebSockets, Server-Sent Events, Long Polling), each asserted from the
/// proxy's log; and a proxy that refuses the tunnel failing `start()` with its status.
@Suite(.serialized, .timeLimit(.minutes(3))) struct HubConnectionProxyTests {
    @Test(arguments: [ProxyProcess.Kind.tinyproxy(), .tinyproxy(username: "hub", password: "pw"), .dante])
    func everyTransportGoesThroughARealProxy(_ kind: ProxyProcess.Kind) async throws {
        let proxy = try await ProxyProcess.start(kind)
        defer { Task { await proxy.stop() } }
        let server = try await SignalRTestServer.start()
        defer { Task { await server.stop() } }
        var runtime = RealtimeRuntime()
        runtime.proxy = proxy.configuration
        for transport in [HttpTransportType.webSockets, .serverSentEvents, .longPolling] {
            let connection = HubConnectionBuilder().withUrl(url: server.url, transport: transport).withRuntime(runtime).build()
            try await connection.start()
            #expect(connection.transport == transport)
            let echoed: String = try await connection.invoke(method: "echo", arguments: "through \(kind)")
            #expect(echoed == "through \(kind)")
            await connection.stop()
        }
        #expect(server.transportsUsed == ["WebSockets", "ServerSentEvents", "LongPolling"])
        try await proxy.waitForTarget(port: server.port)
    }

    /// An https hub (negotiate goes through a `CONNECT` tunnel; a plain-http one would be an
    /// absolute-form request, answered by the server through the proxy).
    @Test func aProxyThatRefusesFailsStartWithItsStatus() async throws {
        let certificates = try await TestCertificates.make()
        defer { certificates.remove() }
        var options = SignalRTestServer.Options()
        options.tls = try certificates.server.serverConfiguration()
        let server = try await SignalRTestServer.start(options: options)
        defer { Task { await server.stop() } }
        let proxy = try await FaultProxy.start(targetPort: server.port, connectFront: .init(answer: .refuse(status: 403)))
        defer { Task { await proxy.stop() } }
        var runtime = RealtimeRuntime()
        runtime.proxy = .http(host: "127.0.0.1", port: proxy.port)
        let tls = TLSOptions(trustRoots: .pemFile(certificates.ca.certificatePath))
        let connection = HubConnectionBuilder().withUrl(url: server.url).withRuntime(runtime).withOptions { $0.tls = tls }.build()
        let error = await #expect(throws: RealtimeError.self) { try await connection.start() }
        #expect(error?.code == .proxyFailed, "\(String(describing: error))")
        #expect(error?.status?.code == 403, "\(String(describing: error))")
        #expect(proxy.connectRequests.first?.status == 403)
        #expect(server.transportsUsed.isEmpty)
    }
}
