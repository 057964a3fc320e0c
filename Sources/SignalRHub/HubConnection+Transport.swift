import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import RealtimeCore

extension HubConnection {
    /// Negotiates (unless skipped), picks a transport and completes the handshake. Returns once the
    /// connection is usable; the transport then runs in its own task until it ends.
    func openTransport() async throws {
        var bearer = try await options.accessTokenProvider?()
        if bearer?.isEmpty == true { bearer = nil }
        var url = options.url
        var connectionToken: String?
        if options.skipNegotiation {
            guard options.transports == .webSockets else {
                throw RealtimeError(.refused, "skipNegotiation works only with transports == .webSockets")
            }
        } else {
            let result = try await Negotiation.negotiate(url: options.url, options: options, accessToken: bearer, runtime: options.runtime)
            url = result.url
            connectionToken = result.connectionToken
            if let token = result.accessToken { bearer = token }
            state.withLockedValue { $0.connectionId = result.connectionId }
            let format = options.hubProtocol.transferFormat
            let offered = result.transports.filter { options.transports.contains($0.0) && $0.1.contains(format) }.map(\.0)
            guard offered.contains(.webSockets) else {
                let names = result.transports.map { $0.0.negotiateName }
                throw RealtimeError(
                    .refused,
                    "no usable transport: the server offers [\(names.joined(separator: ", "))], the client allows "
                        + "\(Self.names(options.transports)) with \(format.rawValue) data; this version implements WebSockets only")
            }
        }
        try await openWebSocket(url: Negotiation.transportURL(url, connectionToken: connectionToken), bearer: bearer)
    }

    static func names(_ transports: HttpTransportType) -> String {
        "[" + [HttpTransportType.webSockets, .serverSentEvents, .longPolling].filter { transports.contains($0) }.map(\.negotiateName)
            .joined(separator: ", ") + "]"
    }

    private func openWebSocket(url httpURL: String, bearer: String?) async throws {
        var wsURL = httpURL
        if wsURL.hasPrefix("https://") { wsURL = "wss://" + wsURL.dropFirst(8) } else if wsURL.hasPrefix("http://") { wsURL = "ws://" + wsURL.dropFirst(7) }
        var headers = options.httpHeaders
        if let bearer { headers.replaceOrAdd(name: "Authorization", value: "Bearer \(bearer)") }
        let configuration = WebSocketConfiguration(
            headers: headers, cookies: options.cookies, maxMessageSize: options.maximumReceiveMessageSize, autoPing: nil,
            connectTimeout: options.handshakeTimeout, tls: options.tls)
        let generation = state.withLockedValue { shared -> Int in
            shared.generation += 1
            return shared.generation
        }
        let ready = OneShot<Void>()
        let run = SessionRun()
        logger.debug("opening the WebSocket to \(Redaction.url(wsURL))")
        let task = Task {
            var endError: RealtimeError?
            do {
                let closeInfo = try await WebSocketTransport.connect(to: wsURL, configuration: configuration, runtime: options.runtime) { ws in
                    try await self.runWebSocketSession(ws, generation: generation, run: run, ready: ready, closeTimeout: configuration.closeTimeout)
                }
                if let closeInfo, closeInfo.code != 1000, run.closeRequest == nil {
                    endError = RealtimeError(.webSocketClosed, "the server closed the WebSocket with code \(closeInfo.code)", closeCode: closeInfo.code)
                }
            } catch let error as RealtimeError {
                endError = error
            } catch {
                // After the handshake an I/O error is a lost connection, not a failed connect.
                endError = run.handshakeDone
                    ? RealtimeError(.connectionClosed, "the connection was lost: \(Redaction.describe(error))", underlying: error)
                    : Self.realtimeError(error)
            }
            if !run.handshakeDone {
                ready.complete(.failure(endError ?? RealtimeError(.connectionClosed, "the server closed the connection during the handshake")))
                return
            }
            let (error, allowReconnect) = run.outcome(transportError: endError)
            await self.transportEnded(generation: generation, error: error, allowReconnect: allowReconnect)
        }
        run.setTask(task)
        try await ready.value()
    }

    private func runWebSocketSession(
        _ ws: WebSocketConnection, generation: Int, run: SessionRun, ready: OneShot<Void>, closeTimeout: Duration
    ) async throws {
        let binary = options.hubProtocol == .messagepack
        let session = Session(
            generation: generation,
            send: { bytes in
                if binary {
                    try await ws.send(binary: ByteBuffer(bytes: bytes))
                } else {
                    try await ws.send(text: String(decoding: bytes, as: UTF8.self))
                }
            },
            close: { error in
                run.requestClose(error)
                // An aborted connection (server timeout) does not wait for a closing handshake the
                // server will not answer: the session ends now.
                guard error == nil else { return run.cancelTask() }
                try? await ws.close(code: 1000, reason: nil)
                Task {
                    try? await Task.sleep(for: closeTimeout)
                    run.cancelTask()
                }
            })
        try await ws.send(text: String(decoding: HubHandshake.request(options.hubProtocol), as: UTF8.self))
        state.withLockedValue { $0.machine.didSend(now: timeline.now) }
        let timer = Task { await self.runTimers(session: session, run: run) }
        defer { timer.cancel() }
        var handshakeBytes: [UInt8] = []
        var framer = HubMessageFramer(options.hubProtocol, maximumMessageSize: options.maximumReceiveMessageSize)
        var messages: [HubMessage] = []
        let codec = codec
        for try await message in ws.inbound {
            var bytes: [UInt8]
            switch message {
            case .text(let text): bytes = Array(text.utf8)
            case .binary(let buffer): bytes = Array(buffer: buffer)
            }
            state.withLockedValue { $0.machine.didReceive(now: timeline.now) }
            if !run.handshakeDone {
                handshakeBytes += bytes
                let response: HubHandshake.Response
                do { response = try HubHandshake.parseResponse(handshakeBytes) } catch {
                    throw RealtimeError(.protocolViolation, "the server's handshake response is invalid: \(error)", underlying: error)
                }
                switch response {
                case .incomplete:
                    continue
                case .refused(let error, _):
                    throw RealtimeError(.refused, "the server refused the handshake: \(error)", serverMessage: error)
                case .accepted(let consumed):
                    bytes = Array(handshakeBytes[consumed...])
                    handshakeBytes = []
                    let actions = state.withLockedValue { shared -> [HubConnectionStateMachine.Action] in
                        shared.session = session
                        return shared.machine.connected(now: timeline.now)
                    }
                    run.markHandshakeDone()
                    ready.complete(.success(()))
                    Task { await self.performConnected(actions) }
                }
            }
            messages.removeAll(keepingCapacity: true)
            do {
                try framer.consume(bytes) { (body) throws(HubProtocolError) in messages.append(try codec.decode(body: body)) }
            } catch {
                throw RealtimeError(.protocolViolation, "the server sent an invalid \(options.hubProtocol) message: \(error)", underlying: error)
            }
            for message in messages {
                if try await handle(message, run: run) { try? await ws.close(code: 1000, reason: nil) }
            }
        }
    }

    /// Handles one message from the server; returns true when the connection must close.
    private func handle(_ message: HubMessage, run: SessionRun) async throws -> Bool {
        switch message {
        case .ping, .ack, .sequence:
            return false
        case .invocation(let invocation):
            await state.withLockedValue { $0.dispatcher }?.send(invocation)
            return false
        case .streamItem(let item):
            if case .stream(let buffer)? = state.withLockedValue({ $0.pending[item.invocationId] }) {
                await buffer.send(item.item)
            }
            return false
        case .completion(let completion):
            let result: Result<JSONValue?, any Error> = switch completion.outcome {
            case .void: .success(nil)
            case .result(let value): .success(value)
            case .error(let text): .failure(HubInvocationError(message: text))
            }
            guard let pending = state.withLockedValue({ $0.pending.removeValue(forKey: completion.invocationId) }) else { return false }
            switch pending {
            case .invocation(let reply): reply.complete(result)
            case .stream(let buffer):
                if case .failure(let error) = result { buffer.finish(throwing: error) } else { buffer.finish() }
            }
            return false
        case .streamInvocation, .cancelInvocation:
            logger.warning("the server sent a \(message.type == 4 ? "StreamInvocation" : "CancelInvocation"), which a client does not serve; ignored")
            return false
        case .close(let close):
            run.serverClosed(close)
            return true
        }
    }

    private func performConnected(_ actions: [HubConnectionStateMachine.Action]) async {
        for action in actions {
            switch action {
            case .notifyReconnected:
                notifyDelegate { $0.connectionDidReconnect() }
                for handler in state.withLockedValue({ $0.reconnected }) { await handler() }
            case .closeTransport:
                if let session = state.withLockedValue({ $0.session }) { await session.close(nil) }
            default:
                break
            }
        }
    }

    /// Handshake timeout, keep-alive pings and the server timeout, on the runtime's clock.
    private func runTimers(session: Session, run: SessionRun) async {
        let handshakeDeadline = timeline.now + options.handshakeTimeout
        while !Task.isCancelled, !run.handshakeDone {
            let now = timeline.now
            if now >= handshakeDeadline {
                await session.close(RealtimeError(.timeout, "the server did not answer the handshake within \(options.handshakeTimeout)"))
                return
            }
            try? await timeline.sleep(until: min(handshakeDeadline, now + .milliseconds(50)))
        }
        while !Task.isCancelled {
            guard let deadline = state.withLockedValue({ $0.machine.nextDeadline }) else { return }
            if timeline.now < deadline {
                do { try await timeline.sleep(until: deadline) } catch { return }
            }
            let actions = state.withLockedValue { shared -> [HubConnectionStateMachine.Action] in
                guard shared.session?.generation == session.generation else { return [] }
                return shared.machine.timerFired(now: timeline.now)
            }
            for action in actions {
                switch action {
                case .sendPing:
                    try? await session.send(codec.encode(.ping))
                case .abortTransport(let error):
                    await session.close(error)
                    return
                default:
                    break
                }
            }
        }
    }
}

/// What happened to one transport session, from any task.
final class SessionRun: Sendable {
    private struct State {
        var handshakeDone = false
        /// Set when the client closed: nil error for stop(), an error for a timeout.
        var closeRequest: RealtimeError??
        var serverClose: HubClose?
        var task: Task<Void, Never>?
        var cancelRequested = false
    }

    private let state = NIOLockedValueBox(State())

    var handshakeDone: Bool { state.withLockedValue { $0.handshakeDone } }
    var closeRequest: RealtimeError?? { state.withLockedValue { $0.closeRequest } }

    func markHandshakeDone() { state.withLockedValue { $0.handshakeDone = true } }

    func requestClose(_ error: RealtimeError?) {
        state.withLockedValue { if $0.closeRequest == nil { $0.closeRequest = .some(error) } }
    }

    func setTask(_ task: Task<Void, Never>) {
        let cancelNow = state.withLockedValue { state -> Bool in
            state.task = task
            return state.cancelRequested
        }
        if cancelNow { task.cancel() }
    }

    func cancelTask() {
        state.withLockedValue { state -> Task<Void, Never>? in
            state.cancelRequested = true
            return state.task
        }?.cancel()
    }

    func serverClosed(_ close: HubClose) { state.withLockedValue { $0.serverClose = close } }

    /// The session's end as the state machine sees it: the error (nil = a clean end) and whether
    /// a reconnect is allowed.
    func outcome(transportError: RealtimeError?) -> (RealtimeError?, Bool) {
        state.withLockedValue { state in
            if let close = state.serverClose {
                if close.allowReconnect {
                    return (RealtimeError(
                        .connectionClosed, close.error.map { "the server closed the connection with an error: \($0); it allows a reconnect" }
                            ?? "the server closed the connection and allows a reconnect", serverMessage: close.error), true)
                }
                return (close.error.map { RealtimeError(.connectionClosed, "the server closed the connection with an error: \($0)", serverMessage: $0) }, false)
            }
            if let request = state.closeRequest { return (request, request != nil) }
            return (transportError ?? RealtimeError(.connectionClosed, "the server closed the connection"), true)
        }
    }
}
