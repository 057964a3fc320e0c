import Foundation
import NIOHTTP1
import NIOSSL
import RealtimeCore
import RealtimeTesting
import SocketIOEngine
import Testing

/// Socket.IO through real proxies (tinyproxy with and without credentials, dante's SOCKS5): the
/// polling handshake, the upgrade to WebSocket and acks, over http/ws and https/wss, each
/// asserted from the proxy's log; and a refusing proxy failing the connect with its status.
@Suite(.serialized, .timeLimit(.minutes(3))) final class SocketIOProxyTests {
    let certificates: TestCertificates

    init() async throws {
        certificates = try await TestCertificates.make()
    }

    deinit { certificates.remove() }

    @Test(arguments: [ProxyProcess.Kind.tinyproxy(), .tinyproxy(username: "sio", password: "pw"), .dante])
    func pollingAndWebSocketGoThroughARealProxy(_ kind: ProxyProcess.Kind) async throws {
        let proxy = try await ProxyProcess.start(kind)
        defer { Task { await proxy.stop() } }
        var secureOptions = SocketIOTestServer.Options()
        secureOptions.tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMFile(certificates.server.certificatePath).map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(file: certificates.server.keyPath, format: .pem)))
        for options in [SocketIOTestServer.Options(), secureOptions] {
            let server = try await SocketIOTestServer.start(options: options)
            var configuration = SocketIOConfiguration.testing()
            configuration.engine.tls = TLSOptions(trustRoots: .pemFile(certificates.ca.certificatePath))
            configuration.runtime.proxy = proxy.configuration
            let manager = SocketManager(url: server.url, configuration: configuration)
            let socket = manager.defaultSocket
            try await socket.connect(timeout: .seconds(30))
            #expect(try await socket.emitWithAck("echo", arguments: ["over polling or ws"], timeout: .seconds(30)) == ["over polling or ws"])
            try await waitUntil("the upgrade to WebSocket through \(kind)") { manager.transport == .websocket }
            #expect(try await socket.emitWithAck("echo", arguments: ["over ws"], timeout: .seconds(30)) == ["over ws"])
            try await proxy.waitForTarget(port: server.port)
            manager.disconnect()
            await manager.waitUntilStopped()
            await server.stop()
        }
    }

    @Test func aProxyThatRefusesFailsTheConnectWithItsStatus() async throws {
        let server = try await SocketIOTestServer.start()
        let proxy = try await FaultProxy.start(targetPort: server.port, connectFront: .init(username: "u", password: "right"))
        defer { Task { await proxy.stop() } }
        var configuration = SocketIOConfiguration.testing([.websocket])
        configuration.reconnectionAttempts = 1
        configuration.runtime.proxy = .http(host: "127.0.0.1", port: proxy.port, username: "u", password: "wrong")
        let manager = SocketManager(url: server.url, configuration: configuration)
        let error = await #expect(throws: RealtimeError.self) { try await manager.defaultSocket.connect(timeout: .seconds(30)) }
        let failure = error?.code == .reconnectGaveUp ? error?.underlying as? RealtimeError : error
        #expect(failure?.code == .proxyFailed, "\(String(describing: error))")
        #expect(failure?.status?.code == 407)
        #expect(!"\(String(describing: error))".contains("wrong"))
        #expect(proxy.connectRequests.count >= 1)
        #expect(server.receivedEvents.isEmpty)
        manager.disconnect()
        await manager.waitUntilStopped()
        await server.stop()
    }
}
