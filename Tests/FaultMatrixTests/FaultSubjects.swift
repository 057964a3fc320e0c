import EventSourceClient
import Foundation
import NIOConcurrencyHelpers
import NIOHTTP1
import NIOSSL
import RealtimeCore
import RealtimeTesting
import SignalRHub
import SocketIOEngine
import SpreadbotClient

/// A message that did not come back as sent.
struct ExchangeFailed: Error, CustomStringConvertible {
    let description: String
}

// MARK: Socket.IO

/// Socket.IO against `SocketIOTestServer` (pings every second, 2 s to answer): emits with acks to
/// its `echo` handler.
final class SocketIOSubject: FaultSubject {
    let cell: FaultCell
    private let server = NIOLockedValueBox<SocketIOTestServer?>(nil)
    private let manager = NIOLockedValueBox<SocketManager?>(nil)
    private let connects = Recorder<Int>()
    private let disconnects = Recorder<String>()
    private let gaveUps = Recorder<Int>()

    init(_ cell: FaultCell) { self.cell = cell }

    func startServer(tls: TLSConfiguration?) async throws -> Int {
        var options = SocketIOTestServer.Options()
        options.tls = tls
        options.pingInterval = .seconds(1)
        options.pingTimeout = .seconds(2)
        if cell.fault == .payloadLimit { options.maxPayload = matrixPayloadLimit }
        let started = try await SocketIOTestServer.start(options: options)
        server.withLockedValue { $0 = started }
        return started.port
    }

    func stopServer() async {
        await server.withLockedValue { $0 }?.stop()
    }

    var socket: SocketIOClient? { manager.withLockedValue { $0 }?.defaultSocket }

    func connect(base: String, tls: TLSOptions, runtime: RealtimeRuntime) async throws {
        var configuration = SocketIOConfiguration()
        configuration.engine.transports = switch cell.subject {
        case .socketIOWebSocket: [.websocket]
        case .socketIOPolling: [.polling]
        default: [.polling, .websocket]
        }
        configuration.engine.upgrade = cell.subject == .socketIOUpgrade
        configuration.engine.connectTimeout = .seconds(30)
        configuration.engine.tls = tls
        configuration.reconnectionDelay = .milliseconds(100)
        configuration.reconnectionDelayMax = .milliseconds(500)
        configuration.reachability = AlwaysReachable()
        configuration.runtime = runtime
        let created = SocketManager(url: base, configuration: configuration)
        manager.withLockedValue { $0 = created }
        let socket = created.defaultSocket
        socket.on(clientEvent: .connect) { [connects] _ in connects.append(1) }
        socket.on(clientEvent: .disconnect) { [disconnects] event in disconnects.append(event.arguments.first?.stringValue ?? "\(event.arguments)") }
        socket.on(clientEvent: .reconnectFailed) { [gaveUps] _ in gaveUps.append(1) }
        try await socket.connect(timeout: .seconds(30))
        if cell.subject == .socketIOUpgrade {
            try await waitUntil("the upgrade to WebSocket") { created.transport == .websocket }
        }
    }

    func exchange(_ text: String) async throws {
        guard let socket else { throw ExchangeFailed(description: "no client") }
        let reply = try await socket.emitWithAck("echo", arguments: [.string(text)], timeout: .seconds(30))
        guard reply == [.string(text)] else { throw ExchangeFailed(description: "echo of \(text) answered \(reply)") }
    }

    func sendDuringOutage(_ text: String) async -> String? {
        guard let socket else { return "no client" }
        do {
            try await exchange(text)
            let arrived = server.withLockedValue { $0 }?.receivedEvents.contains { $0.name == "echo" && $0.arguments == [.string(text)] } ?? false
            return arrived ? nil : "acked, but the server has no record of it"
        } catch {
            _ = socket
            return "\(error)"
        }
    }

    func sendOversized() async -> RealtimeError? {
        guard let socket else { return nil }
        do {
            _ = try await socket.emitWithAck("echo", arguments: [.string(String(repeating: "x", count: 2 * matrixPayloadLimit))], timeout: .seconds(30))
            return nil
        } catch {
            return error as? RealtimeError
        }
    }

    var opens: Int { connects.values.count }
    var losses: [Loss] { disconnects.values.map { Loss(reason: $0) } }
    var gaveUp: Bool { !gaveUps.values.isEmpty }

    func stopClient() async {
        guard let manager = manager.withLockedValue({ $0 }) else { return }
        manager.disconnect()
        await manager.waitUntilStopped()
    }
}

// MARK: SignalR

/// SignalR against `SignalRTestServer` (keep-alive every second, a 4 s server timeout in the
/// client): invocations of its `echo` method.
final class SignalRSubject: FaultSubject {
    let cell: FaultCell
    private let server = NIOLockedValueBox<SignalRTestServer?>(nil)
    private let connection = NIOLockedValueBox<HubConnection?>(nil)
    private let reconnecting = Recorder<Loss>()
    private let reconnected = Recorder<Int>()
    private let closed = Recorder<String>()

    init(_ cell: FaultCell) { self.cell = cell }

    var transport: HttpTransportType {
        switch cell.subject {
        case .signalRSSE: .serverSentEvents
        case .signalRLongPolling: .longPolling
        default: .webSockets
        }
    }

    func startServer(tls: TLSConfiguration?) async throws -> Int {
        var options = SignalRTestServer.Options()
        options.tls = tls
        options.keepAliveInterval = .seconds(1)
        if cell.fault == .longPollSilence {
            // Long polls held 10 s with nothing in them, as ASP.NET Core holds them (90 s) with
            // no ping: far past the client's 4 s server timeout.
            options.keepAliveInterval = nil
            options.pollTimeout = .seconds(10)
        }
        let started = try await SignalRTestServer.start(options: options)
        server.withLockedValue { $0 = started }
        return started.port
    }

    func stopServer() async {
        await server.withLockedValue { $0 }?.stop()
    }

    func connect(base: String, tls: TLSOptions, runtime: RealtimeRuntime) async throws {
        let built = HubConnectionBuilder()
            .withUrl(url: base + "/hub", transport: transport)
            .withRuntime(runtime)
            .withOptions {
                $0.tls = tls
                $0.serverTimeout = .seconds(4)
            }
            // Attempts for about 40 s: through a restarted relay or proxy on a loaded machine an
            // attempt can take seconds.
            .withAutomaticReconnect([0, 0.2, 0.5, 1, 1, 1, 2, 2, 2, 2, 2, 2, 5, 5, 5, 5])
            .build()
        built.onReconnecting { [reconnecting] error in
            reconnecting.append((error as? RealtimeError).map(Loss.init) ?? Loss(reason: "\(error)"))
        }
        built.onReconnected { [reconnected] in reconnected.append(1) }
        built.onClosed { [closed] error in closed.append("\(String(describing: error))") }
        connection.withLockedValue { $0 = built }
        try await built.start()
    }

    func exchange(_ text: String) async throws {
        guard let connection = connection.withLockedValue({ $0 }) else { throw ExchangeFailed(description: "no client") }
        let reply: String = try await connection.invoke(method: "echo", arguments: text)
        guard reply == text else { throw ExchangeFailed(description: "echo of \(text) answered \(reply)") }
    }

    func sendDuringOutage(_ text: String) async -> String? {
        do {
            try await exchange(text)
            return nil
        } catch {
            return "\(error)"
        }
    }

    func sendOversized() async -> RealtimeError? { nil }

    var opens: Int { 1 + reconnected.values.count }
    var losses: [Loss] { reconnecting.values }
    var gaveUp: Bool { !closed.values.isEmpty }

    func stopClient() async {
        await connection.withLockedValue { $0 }?.stop()
    }
}

// MARK: SSE

/// EventSource against `SSETestServer`: events the server publishes (a 3 s idle timeout, with a
/// tick every 500 ms in the cells where the connection goes silent).
final class EventSourceSubject: FaultSubject {
    let cell: FaultCell
    private let server = NIOLockedValueBox<SSETestServer?>(nil)
    private let source = NIOLockedValueBox<(EventSource, Task<Void, Never>)?>(nil)
    private let ticker = NIOLockedValueBox<Task<Void, Never>?>(nil)
    private let openCount = Recorder<Int>()
    private let events = Recorder<String>()
    private let failures = Recorder<Loss>()
    private let stopped = Recorder<Int>()

    init(_ cell: FaultCell) { self.cell = cell }

    func startServer(tls: TLSConfiguration?) async throws -> Int {
        let started = try await SSETestServer.start(tls: tls)
        // A server started in another's place goes on from its event ids (as a server with a
        // shared store does): the client's Last-Event-ID must not skip the new server's events.
        if let previous = server.withLockedValue({ $0 }) {
            for _ in 1..<max(previous.nextID, 1) { _ = started.publish("filler") }
        }
        server.withLockedValue { $0 = started }
        if cell.fault == .stall {
            let task = Task { [server] in
                while !Task.isCancelled {
                    _ = server.withLockedValue { $0 }?.publish("tick")
                    // A pace: the stream carries something every 500 ms, as a server's keep-alive.
                    try? await Task.sleep(for: .milliseconds(500))
                }
            }
            ticker.withLockedValue { $0?.cancel(); $0 = task }
        }
        return started.port
    }

    func stopServer() async {
        await server.withLockedValue { $0 }?.stop()
    }

    func connect(base: String, tls: TLSOptions, runtime: RealtimeRuntime) async throws {
        var configuration = EventSourceConfiguration()
        configuration.reconnectionTime = .milliseconds(100)
        configuration.maxReconnectionTime = .milliseconds(500)
        configuration.reachability = AlwaysReachable()
        configuration.tls = tls
        configuration.idleTimeout = .seconds(3)
        configuration.connectTimeout = .seconds(30)
        let created = EventSource(url: URL(string: base + "/events")!, configuration: configuration, runtime: runtime)
        let reader = Task { [openCount, events, failures, stopped] in
            do {
                for try await update in created.updates {
                    switch update {
                    case .open: openCount.append(1)
                    case .event(let event): events.append(event.data)
                    case .failure(let error, let willRetry):
                        failures.append(Loss(error))
                        if !willRetry { stopped.append(1) }
                    case .comment: break
                    }
                }
            } catch {
                stopped.append(1)
            }
        }
        source.withLockedValue { $0 = (created, reader) }
        _ = await openCount.wait(for: 1)
        guard opens >= 1 else { throw ExchangeFailed(description: "the stream did not open") }
    }

    func exchange(_ text: String) async throws {
        _ = server.withLockedValue { $0 }?.publish(text)
        try await waitUntil("the event \(text) arrives", limit: .seconds(30)) { events.values.contains(text) }
    }

    func sendDuringOutage(_ text: String) async -> String? {
        do {
            try await exchange(text)
            return nil
        } catch {
            return "\(error)"
        }
    }

    func sendOversized() async -> RealtimeError? { nil }

    var opens: Int { openCount.values.count }
    var losses: [Loss] { failures.values }
    var gaveUp: Bool { !stopped.values.isEmpty }

    func stopClient() async {
        ticker.withLockedValue { $0 }?.cancel()
        guard let (created, reader) = source.withLockedValue({ $0 }) else { return }
        created.close()
        reader.cancel()
    }
}

// MARK: Spreadbot

/// Spreadbot against `SpreadbotTestServer`: acknowledged sends (each a POST) and messages it
/// publishes. Pings every second on WebSockets, a 3 s
/// idle timeout on event streams (with a tick every 500 ms where the connection goes silent).
final class SpreadbotSubject: FaultSubject {
    let cell: FaultCell
    private let server = NIOLockedValueBox<SpreadbotTestServer?>(nil)
    private let client = NIOLockedValueBox<Spreadbot?>(nil)
    private let ticker = NIOLockedValueBox<Task<Void, Never>?>(nil)
    private let openCount = Recorder<Int>()
    private let errors = Recorder<RealtimeError>()
    private let texts = Recorder<String>()
    static let path = "room"

    init(_ cell: FaultCell) { self.cell = cell }

    func startServer(tls: TLSConfiguration?) async throws -> Int {
        var options = SpreadbotTestServer.Options()
        options.tls = tls
        if cell.fault == .payloadLimit { options.postBodyLimit = matrixPayloadLimit }
        let started = try await SpreadbotTestServer.start(options: options)
        server.withLockedValue { $0 = started }
        if cell.fault == .stall && cell.subject == .spreadbotSSE {
            let task = Task { [server] in
                while !Task.isCancelled {
                    _ = server.withLockedValue { $0 }?.publish("tick", to: Self.path)
                    // A pace: the stream carries something every 500 ms, as a server's keep-alive.
                    try? await Task.sleep(for: .milliseconds(500))
                }
            }
            ticker.withLockedValue { $0?.cancel(); $0 = task }
        }
        return started.port
    }

    func stopServer() async {
        await server.withLockedValue { $0 }?.stop()
    }

    func connect(base: String, tls: TLSOptions, runtime: RealtimeRuntime) async throws {
        guard let server = server.withLockedValue({ $0 }) else { throw ExchangeFailed(description: "no server") }
        var configuration = SpreadbotConfiguration(
            baseURL: base, authURL: base + server.authPath, accessToken: server.options.accessToken,
            refreshToken: server.options.refreshToken, base64Credentials: server.options.base64Credentials, runtime: runtime)
        configuration.reachability = AlwaysReachable()
        configuration.reconnectDelay = .milliseconds(100)
        configuration.maxReconnectDelay = .milliseconds(500)
        configuration.maxReconnectAttempts = 50
        configuration.retryDelay = .milliseconds(50)
        configuration.requestTimeout = .seconds(30)
        configuration.transports = [cell.subject == .spreadbotWebSocket ? .webSocket : .serverSentEvents]
        configuration.tls = tls
        configuration.webSocketPingInterval = .seconds(1)
        configuration.eventStreamIdleTimeout = .seconds(3)
        // Sends that promise delivery: each a POST the server answers. (A WebSocket frame is
        // "delivered" once written to the socket, and one written into a connection the network
        // already cut is lost, as with any WebSocket client.)
        configuration.acknowledgedSends = true
        let created = Spreadbot(configuration: configuration)
        created.onOpen { [openCount] in openCount.append(1) }
        created.onError { [errors] error in if let error = error as? RealtimeError { errors.append(error) } }
        created.onMessage { [texts] _, _, data in if let text = data.string { texts.append(text) } }
        client.withLockedValue { $0 = created }
        created.establishConnection(path: Self.path)
        _ = await openCount.wait(for: 1)
        guard opens >= 1 else { throw ExchangeFailed(description: "the connection did not open") }
    }

    func exchange(_ text: String) async throws {
        guard let client = client.withLockedValue({ $0 }), let server = server.withLockedValue({ $0 }) else {
            throw ExchangeFailed(description: "no client")
        }
        try await client.enqueue(.text(text)).delivered()
        try await waitUntil("the server has \(text)", limit: .seconds(30)) { server.received(on: Self.path).contains(.text(text)) }
        _ = server.publish("to client: \(text)", to: Self.path)
        try await waitUntil("the client has \(text)", limit: .seconds(30)) { texts.values.contains("to client: \(text)") }
    }

    func sendDuringOutage(_ text: String) async -> String? {
        do {
            try await exchange(text)
            return nil
        } catch {
            return "\(error)"
        }
    }

    func sendOversized() async -> RealtimeError? {
        guard let client = client.withLockedValue({ $0 }) else { return nil }
        do {
            try await client.enqueue(.text(String(repeating: "x", count: 2 * matrixPayloadLimit))).delivered()
            return nil
        } catch {
            return error as? RealtimeError
        }
    }

    var opens: Int { openCount.values.count }
    var losses: [Loss] {
        errors.values.filter { $0.code != .badStatus || ($0.status?.code ?? 0) < 500 || cell.fault != .payloadLimit }.map(Loss.init)
    }
    var gaveUp: Bool { errors.values.contains { $0.code == .reconnectGaveUp } }

    func stopClient() async {
        ticker.withLockedValue { $0 }?.cancel()
        guard let client = client.withLockedValue({ $0 }) else { return }
        client.closeConnection()
        await client.waitUntilClosed()
    }
}
