import EventSourceClient
import Foundation
import NIOSSL
import RealtimeCore
import RealtimeTesting
import SignalRHub
import SocketIOEngine
import SpreadbotClient
import Testing

/// An established TLS connection whose TCP path dies without a TLS close: a plain TCP relay (a
/// process of its own, `Scripts/peers/tcp_relay.py`) between the client and a TLS server is killed
/// with SIGKILL mid-session and started again on the same port a moment later, as a relay, a proxy
/// or a NAT box that dies and comes back does. Every protocol must report a lost connection
/// (`connectionClosed` at stage `established`, never `tlsFailure`), reconnect through the restarted
/// relay, and carry messages again.
@Suite(.serialized, .timeLimit(.minutes(3)))
final class RelayKillTests {
    let certificates: TestCertificates

    init() async throws {
        certificates = try await TestCertificates.make()
    }

    deinit { certificates.remove() }

    var serverTLS: TLSConfiguration {
        get throws { try certificates.server.serverConfiguration() }
    }

    var clientTLS: TLSOptions { TLSOptions(trustRoots: .pemFile(certificates.ca.certificatePath)) }

    /// Kills the relay, keeps it down for a moment (attempts meanwhile are refused, as a dead
    /// relay's port refuses them), then starts it again on its port.
    func killAndRestart(_ relay: TCPRelay) async throws {
        await relay.kill()
        // The relay stays down for a while as a restarted box does; nothing to await but time.
        try await Task.sleep(for: .seconds(1))
        try await relay.restart()
    }

    /// Errors a lost connection may be reported as: a lost connection, or, for attempts while the
    /// relay is down, a refused connect; never a TLS failure.
    static func isLostOrRefused(_ error: RealtimeError) -> Bool {
        error.code == .connectionClosed || error.code == .connectFailed || error.code == .timeout
    }

    @Test("Socket.IO over wss and over https polling: a killed relay is a lost connection, and it reconnects",
          arguments: [[EngineIOOptions.Transport.websocket], [.polling]])
    func socketIO(_ transports: [EngineIOOptions.Transport]) async throws {
        var options = SocketIOTestServer.Options()
        options.tls = try serverTLS
        let server = try await SocketIOTestServer.start(options: options)
        let relay = try await TCPRelay.start(to: server.port)
        var configuration = SocketIOConfiguration()
        configuration.engine.transports = transports
        configuration.engine.upgrade = false
        configuration.engine.connectTimeout = .seconds(30)
        configuration.engine.tls = clientTLS
        configuration.reconnectionDelay = .milliseconds(100)
        configuration.reconnectionDelayMax = .milliseconds(500)
        configuration.reachability = AlwaysReachable()
        let manager = SocketManager(url: relay.relayed(server.url), configuration: configuration)
        let socket = manager.defaultSocket
        let errors = Recorder<String>()
        let connects = Recorder<Int>()
        let gaveUp = Recorder<Int>()
        socket.on(clientEvent: .error) { errors.append("\($0.arguments)") }
        socket.on(clientEvent: .connect) { _ in connects.append(1) }
        socket.on(clientEvent: .reconnectFailed) { _ in gaveUp.append(1) }
        try await socket.connect(timeout: .seconds(30))
        #expect(try await socket.emitWithAck("echo", arguments: ["before"], timeout: .seconds(30)) == ["before"])
        try await killAndRestart(relay)
        _ = await connects.wait(for: 2, limit: .seconds(60))
        #expect(connects.values.count >= 2, "reconnected through the restarted relay")
        #expect(try await socket.emitWithAck("echo", arguments: ["after"], timeout: .seconds(30)) == ["after"])
        #expect(gaveUp.values.isEmpty)
        #expect(!errors.values.contains { $0.contains("tlsFailure") || $0.contains("handshake") }, "\(errors.values)")
        manager.disconnect()
        await manager.waitUntilStopped()
        await relay.stop()
        await server.stop()
    }

    @Test("Spreadbot over wss and over https SSE: a killed relay is a lost connection, and it reconnects",
          arguments: [SpreadbotTransport.webSocket, .serverSentEvents])
    func spreadbot(_ transport: SpreadbotTransport) async throws {
        var options = SpreadbotTestServer.Options()
        options.tls = try serverTLS
        let server = try await SpreadbotTestServer.start(options: options)
        let relay = try await TCPRelay.start(to: server.port)
        var configuration = SpreadbotConfiguration(
            baseURL: relay.relayed(server.baseURL), authURL: server.authURL, accessToken: server.options.accessToken,
            refreshToken: server.options.refreshToken, base64Credentials: server.options.base64Credentials)
        configuration.reachability = AlwaysReachable()
        configuration.reconnectDelay = .milliseconds(100)
        configuration.maxReconnectDelay = .milliseconds(500)
        configuration.maxReconnectAttempts = 50
        configuration.requestTimeout = .seconds(30)
        configuration.transports = [transport]
        configuration.tls = clientTLS
        let client = Spreadbot(configuration: configuration)
        let errors = Recorder<RealtimeError>()
        let opens = Recorder<Int>()
        let texts = Recorder<String>()
        client.onOpen { opens.append(1) }
        client.onError { error in if let error = error as? RealtimeError { errors.append(error) } }
        client.onMessage { _, _, data in if let text = data.string { texts.append(text) } }
        client.establishConnection(path: "room")
        _ = await opens.wait(for: 1)
        _ = server.publish("before", to: "room")
        _ = await texts.wait(for: 1)
        try await killAndRestart(relay)
        _ = await opens.wait(for: 2, limit: .seconds(60))
        #expect(opens.values.count >= 2, "reconnected through the restarted relay")
        let lost = await errors.wait(for: 1)
        #expect(lost.first?.code == .connectionClosed, "\(lost)")
        #expect(lost.first?.stage == .established, "\(lost)")
        #expect(!"\(lost)".contains("handshake"), "\(lost)")
        #expect(lost.allSatisfy(Self.isLostOrRefused), "\(lost)")
        _ = server.publish("after", to: "room")
        try await waitUntil("the message after the restart arrives") { texts.values.contains("after") }
        client.closeConnection()
        await client.waitUntilClosed()
        await relay.stop()
        await server.stop()
    }

    @Test("SignalR over wss, https SSE and https long polling: a killed relay is a lost connection, and it reconnects",
          arguments: [HttpTransportType.webSockets, .serverSentEvents, .longPolling])
    func signalR(_ transport: HttpTransportType) async throws {
        var options = SignalRTestServer.Options()
        options.tls = try serverTLS
        let server = try await SignalRTestServer.start(options: options)
        let relay = try await TCPRelay.start(to: server.port)
        let tls = clientTLS
        let connection = HubConnectionBuilder()
            .withUrl(url: relay.relayed(server.url), transport: transport)
            .withOptions { $0.tls = tls }
            // Attempts for about 40 s: on a loaded machine an attempt through the restarted relay
            // can take seconds.
            .withAutomaticReconnect([0, 0.5, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 5, 5, 5, 5])
            .build()
        let reconnecting = Recorder<RealtimeError?>()
        let reconnected = Recorder<Int>()
        connection.onReconnecting { error in reconnecting.append(error as? RealtimeError) }
        connection.onReconnected { reconnected.append(1) }
        try await connection.start()
        let before: Int = try await connection.invoke(method: "echo", arguments: 1)
        #expect(before == 1)
        try await killAndRestart(relay)
        let lost = await reconnecting.wait(for: 1)
        #expect(lost.first??.code == .connectionClosed, "\(lost)")
        #expect(lost.first??.stage == .established, "\(lost)")
        #expect(!"\(lost)".contains("handshake"), "\(lost)")
        _ = await reconnected.wait(for: 1, limit: .seconds(60))
        #expect(connection.currentState == .connected, "\(reconnecting.values)")
        let after: Int = try await connection.invoke(method: "echo", arguments: 2)
        #expect(after == 2)
        await connection.stop()
        await relay.stop()
        await server.stop()
    }

    @Test("SSE over https: a killed relay is a lost connection, and the stream resumes with Last-Event-ID")
    func eventSource() async throws {
        let server = try await SSETestServer.start(tls: try serverTLS)
        let relay = try await TCPRelay.start(to: server.port)
        var configuration = EventSourceConfiguration()
        configuration.reconnectionTime = .milliseconds(100)
        configuration.maxReconnectionTime = .milliseconds(500)
        configuration.reachability = AlwaysReachable()
        configuration.tls = clientTLS
        let source = EventSource(url: URL(string: relay.relayed(server.url))!, configuration: configuration)
        let updates = Recorder<String>()
        let failures = Recorder<RealtimeError>()
        let reader = Task {
            for try await update in source.updates {
                switch update {
                case .open: updates.append("open")
                case .event(let event): updates.append("event \(event.data)")
                case .failure(let error, let willRetry):
                    failures.append(error)
                    updates.append("failure \(error.code) \(willRetry)")
                case .comment: break
                }
            }
        }
        try await waitUntil("the stream opens") { updates.values.contains("open") }
        server.publish("before")
        try await waitUntil("the first event") { updates.values.contains("event before") }
        try await killAndRestart(relay)
        try await waitUntil("the stream opens again", limit: .seconds(60)) { updates.values.filter { $0 == "open" }.count >= 2 }
        let lost = failures.values
        #expect(lost.first?.code == .connectionClosed, "\(lost)")
        #expect(lost.first?.stage == .established, "\(lost)")
        #expect(!"\(lost)".contains("handshake"), "\(lost)")
        #expect(lost.allSatisfy(Self.isLostOrRefused), "\(lost)")
        #expect(!updates.values.contains { $0.hasPrefix("failure") && $0.hasSuffix("false") }, "\(updates.values)")
        #expect(server.lastEventIDs.last == "1")
        server.publish("after")
        try await waitUntil("the event after the restart") { updates.values.contains("event after") }
        source.close()
        reader.cancel()
        await relay.stop()
        await server.stop()
    }
}
