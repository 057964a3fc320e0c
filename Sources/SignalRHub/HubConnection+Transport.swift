import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import RealtimeCore

extension HubConnection {
    /// Negotiates (unless skipped), picks a transport and completes the handshake. Returns once the
    /// connection is usable; the transport then runs in its own task until it ends.
    ///
    /// Transports are tried in the order WebSockets, Server-Sent Events, Long Polling, among those
    /// the app allows and the server offers with the protocol's transfer format (MessagePack needs
    /// Binary, so never Server-Sent Events). When one fails to connect, the next is tried after a
    /// new negotiate (the failed attempt may have used up the connection token), as the reference
    /// clients do. A refused handshake or negotiate ends the start without trying others.
    func openTransport() async throws {
        var bearer = try await options.accessTokenProvider?()
        if bearer?.isEmpty == true { bearer = nil }
        if options.skipNegotiation {
            guard options.transports == .webSockets else {
                throw RealtimeError(.refused, "skipNegotiation works only with transports == .webSockets")
            }
            var headers = options.httpHeaders
            if let bearer { headers.replaceOrAdd(name: "Authorization", value: "Bearer \(bearer)") }
            state.withLockedValue { $0.replay = nil }
            try await openWebSocket(url: options.url, headers: headers)
            return
        }
        let format = options.hubProtocol.transferFormat
        var failures: [String] = []
        var lastError: RealtimeError?
        var tried: HttpTransportType = []
        while true {
            let result = try await Negotiation.negotiate(url: options.url, options: options, accessToken: bearer, runtime: options.runtime)
            let token = result.accessToken ?? bearer
            state.withLockedValue { $0.connectionId = result.connectionId }
            let offered = result.transports.filter { options.transports.contains($0.0) && $0.1.contains(format) }.map(\.0)
            let candidates = [HttpTransportType.webSockets, .serverSentEvents, .longPolling].filter { offered.contains($0) && !tried.contains($0) }
            guard let transport = candidates.first else {
                if let lastError, !failures.isEmpty {
                    throw RealtimeError(lastError.code, "no transport could connect: \(failures.joined(separator: "; "))",
                        status: lastError.status, serverMessage: lastError.serverMessage, underlying: lastError)
                }
                let names = result.transports.map { $0.0.negotiateName }
                throw RealtimeError(
                    .refused,
                    "no usable transport: the server offers [\(names.joined(separator: ", "))], the client allows "
                        + "\(options.transports) with \(format.rawValue) data")
            }
            tried.insert(transport)
            var headers = options.httpHeaders
            if let token { headers.replaceOrAdd(name: "Authorization", value: "Bearer \(token)") }
            let url = Negotiation.transportURL(result.url, connectionToken: result.connectionToken)
            // Stateful reconnect needs the server's agreement and a WebSocket.
            let stateful = result.useStatefulReconnect && transport == .webSockets
            state.withLockedValue { $0.replay = stateful ? ReplayBuffer(limit: options.statefulReconnectBufferSize) : nil }
            do {
                switch transport {
                case .webSockets: try await openWebSocket(url: url, headers: headers)
                case .serverSentEvents: try await openServerSentEvents(url: url, headers: headers)
                default: try await openLongPolling(url: url, headers: headers)
                }
                return
            } catch {
                let failure = Self.realtimeError(error)
                // A refused handshake is the hub's answer, not the transport's failure.
                if failure.code == .refused || failure.code == .cancelled { throw failure }
                logger.info("the \(transport.negotiateName) transport failed, trying the next: \(failure.detail)")
                failures.append("\(transport.negotiateName): \(failure.detail)")
                lastError = failure
            }
        }
    }

    /// Delays before each attempt to replace a lost WebSocket statefully.
    static let statefulReconnectDelays: [Duration] = [.zero, .milliseconds(250), .seconds(1), .seconds(2)]

    /// The transport in use (nil when not connected).
    public var transport: HttpTransportType? { state.withLockedValue { $0.session?.transport } }

    private func nextGeneration() -> Int {
        state.withLockedValue { shared -> Int in
            shared.generation += 1
            return shared.generation
        }
    }

    /// Runs `body` (the transport's reader) in its own task; returns once the handshake is done.
    private func runSession(
        generation: Int, run: SessionRun, ready: OneShot<Void>, resume: (@Sendable () async throws -> Void)? = nil,
        _ body: @escaping @Sendable () async throws -> WebSocketCloseInfo?
    ) async throws {
        let task = Task {
            var endError: RealtimeError?
            do {
                let closeInfo = try await body()
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
            // Stateful reconnect: a lost WebSocket (not a Close message, not stop()) is replaced
            // once with the same connection id; pending calls wait, nothing is lost or doubled.
            if let error, allowReconnect, !run.closedByServerMessage, let resume,
                let replay = self.state.withLockedValue({ $0.replay })
            {
                replay.disconnected()
                self.logger.info("the WebSocket was lost (\(error.detail)); reconnecting it statefully")
                // The reference clients try once; a socket that fails while it opens (the network
                // is still flapping) gets three more tries, well within the server's wait
                // (30 s by default in ASP.NET Core).
                for delay in HubConnection.statefulReconnectDelays {
                    if delay > .zero { try? await self.timeline.sleep(until: self.timeline.now + delay) }
                    guard self.state.withLockedValue({ $0.machine.state == .connected }) else {
                        self.logger.debug("stateful reconnect stopped: the connection is no longer connected")
                        break
                    }
                    do {
                        try await resume()
                        return
                    } catch {
                        self.logger.info("a stateful reconnect attempt failed: \(Self.realtimeError(error).detail)")
                    }
                }
                self.logger.info("stateful reconnect gave up; the connection ends")
            } else if let error {
                self.logger.debug(
                    "the transport ended (\(error.detail)); no stateful reconnect (allowReconnect: \(allowReconnect), Close message: \(run.closedByServerMessage), stateful: \(resume != nil))")
            }
            await self.transportEnded(generation: generation, error: error, allowReconnect: allowReconnect)
        }
        run.setTask(task)
        try await ready.value()
    }

    // MARK: WebSockets

    private func openWebSocket(url httpURL: String, headers: HTTPHeaders, resuming: Int? = nil) async throws {
        var wsURL = httpURL
        if wsURL.hasPrefix("https://") { wsURL = "wss://" + wsURL.dropFirst(8) } else if wsURL.hasPrefix("http://") { wsURL = "ws://" + wsURL.dropFirst(7) }
        let configuration = WebSocketConfiguration(
            headers: headers, cookies: options.cookies, maxMessageSize: options.maximumReceiveMessageSize, autoPing: nil,
            connectTimeout: options.handshakeTimeout, tls: options.tls)
        let generation = resuming ?? nextGeneration()
        let ready = OneShot<Void>()
        let run = SessionRun()
        let binary = options.hubProtocol == .messagepack
        let replay = state.withLockedValue { $0.replay }
        var resume: (@Sendable () async throws -> Void)?
        if replay != nil {
            resume = { @Sendable in try await self.openWebSocket(url: httpURL, headers: headers, resuming: generation) }
        }
        logger.debug("opening the WebSocket to \(Redaction.url(wsURL))")
        try await runSession(generation: generation, run: run, ready: ready, resume: resume) { [wsURL, resuming] in
            try await WebSocketTransport.connect(to: wsURL, configuration: configuration, runtime: self.options.runtime) { ws in
                // One frame may carry several hub messages (0x1E-terminated JSON, length-prefixed
                // MessagePack): messages sent while a frame is being written go together in the next
                // one, so 1,000 concurrent invocations do not cost 1,000 writes.
                let frames = BatchingSender<[UInt8]>(maxBatchSize: 1 << 20, size: { $0.count }) { batch in
                    var frame: [UInt8]
                    if batch.count == 1 {
                        frame = batch[0]
                    } else {
                        frame = []
                        frame.reserveCapacity(batch.reduce(0) { $0 + $1.count })
                        for bytes in batch { frame += bytes }
                    }
                    if binary {
                        try await ws.send(binary: ByteBuffer(bytes: frame))
                    } else {
                        try await ws.send(text: String(decoding: frame, as: UTF8.self))
                    }
                }
                let session = Session(
                    generation: generation, transport: .webSockets,
                    send: { bytes in try await frames.send(bytes) },
                    close: { error in
                        run.requestClose(error)
                        // An aborted connection (server timeout) does not wait for a closing
                        // handshake the server will not answer: the session ends now.
                        guard error == nil else { return run.cancelTask() }
                        try? await ws.close(code: 1000, reason: nil)
                        Task {
                            try? await Task.sleep(for: configuration.closeTimeout)
                            run.cancelTask()
                        }
                    })
                var pipeline = InboundPipeline(connection: self, session: session, run: run, ready: ready)
                if resuming != nil, let replay {
                    // The same connection on a new socket: no handshake; Sequence, then every
                    // message the server has not acknowledged, then normal sending resumes.
                    let codec = self.codec
                    let ack = try await replay.gate.withLock {
                        self.state.withLockedValue { $0.session = session }
                        return try await replay.resend({ codec.encode(.sequence(sequenceId: $0)) }, write: { try await session.send($0) })
                    }
                    if let ack { try await session.send(codec.encode(.ack(sequenceId: ack))) }
                    self.state.withLockedValue { $0.statefulReconnects += 1 }
                    run.markHandshakeDone()
                    pipeline.skipHandshake()
                    ready.complete(.success(()))
                } else {
                    // Version 2 carries Ack and Sequence; it is asked for only with stateful reconnect,
                    // so servers that know version 1 only keep working (as the reference clients do).
                    let version = replay == nil ? 1 : 2
                    try await ws.send(text: String(decoding: HubHandshake.request(self.options.hubProtocol, version: version), as: UTF8.self))
                }
                let timer = Task { await self.runTimers(session: session, run: run) }
                defer { timer.cancel() }
                for try await message in ws.inbound {
                    let bytes: [UInt8] = switch message {
                    case .text(let text): Array(text.utf8)
                    case .binary(let buffer): Array(buffer: buffer)
                    }
                    if try await pipeline.feed(bytes) { try? await ws.close(code: 1000, reason: nil) }
                }
            }
        }
    }

    // MARK: HTTP sends (Server-Sent Events and Long Polling)

    /// POSTs outgoing messages, one request at a time; messages sent meanwhile go in the next one.
    private func postSender(url: String, headers: HTTPHeaders) -> BatchingSender<[UInt8]> {
        let options = options
        return BatchingSender(maxBatchSize: 1 << 20, size: { $0.count }) { batch in
            var body = ByteBuffer()
            for bytes in batch { body.writeBytes(bytes) }
            var request = HTTPRequestSpec(url: url, method: .POST, headers: headers, body: body, tls: options.tls, headTimeout: options.negotiateTimeout)
            request.headers.replaceOrAdd(name: "Content-Type", value: options.hubProtocol == .json ? "text/plain;charset=UTF-8" : "application/octet-stream")
            request.cookies = options.cookies
            let (head, _) = try await HTTPTransport.execute(request, runtime: options.runtime)
            switch head.status.code {
            case 200...299: return
            case 404: throw RealtimeError(.connectionClosed, "the server no longer knows this connection (POST answered 404)", status: head.status)
            default: throw RealtimeError.badStatus(head.status, url: url)
            }
        }
    }

    // MARK: Server-Sent Events

    private func openServerSentEvents(url: String, headers: HTTPHeaders) async throws {
        let generation = nextGeneration()
        let ready = OneShot<Void>()
        let run = SessionRun()
        let sender = postSender(url: url, headers: headers)
        var streamHeaders = headers
        streamHeaders.replaceOrAdd(name: "Accept", value: "text/event-stream")
        var request = HTTPRequestSpec(url: url, method: .GET, headers: streamHeaders, tls: options.tls, headTimeout: options.handshakeTimeout)
        request.cookies = options.cookies
        let session = Session(
            generation: generation, transport: .serverSentEvents,
            send: { bytes in try await sender.send(bytes) },
            close: { error in
                run.requestClose(error)
                run.cancelTask()
            })
        let maximum = options.maximumReceiveMessageSize
        logger.debug("opening the Server-Sent Events stream \(Redaction.url(url))")
        try await runSession(generation: generation, run: run, ready: ready) { [request] in
            try await HTTPTransport.stream(request, runtime: self.options.runtime) { head, chunks in
                guard head.status.code == 200 else {
                    throw RealtimeError.badStatus(head.status, url: url)
                }
                guard head.mediaType == "text/event-stream" else {
                    throw RealtimeError(.badContentType, "the Server-Sent Events stream \(Redaction.url(url)) has content type \(head.mediaType ?? "none")")
                }
                try await sender.send(HubHandshake.request(self.options.hubProtocol))
                var pipeline = InboundPipeline(connection: self, session: session, run: run, ready: ready)
                let timer = Task { await self.runTimers(session: session, run: run) }
                defer { timer.cancel() }
                var parser = SSEParser(configuration: .init(maxEventSize: maximum))
                var payloads: [[UInt8]] = []
                for try await chunk in chunks {
                    payloads.removeAll(keepingCapacity: true)
                    do {
                        try parser.parse(chunk) { output in
                            if case .event(let event) = output { payloads.append(Array(event.data.utf8)) }
                        }
                    } catch {
                        throw RealtimeError(.messageTooLarge, "a Server-Sent Event exceeds maximumReceiveMessageSize (\(maximum) bytes)", underlying: error)
                    }
                    for payload in payloads where try await pipeline.feed(payload) { return nil }
                }
                return nil
            }
        }
    }

    // MARK: Long Polling

    private func openLongPolling(url: String, headers: HTTPHeaders) async throws {
        let generation = nextGeneration()
        let ready = OneShot<Void>()
        let run = SessionRun()
        let sender = postSender(url: url, headers: headers)
        let options = options
        let session = Session(
            generation: generation, transport: .longPolling,
            send: { bytes in try await sender.send(bytes) },
            close: { error in
                run.requestClose(error)
                if error == nil {
                    // DELETE ends the server's side; it answers the pending poll with 204.
                    var delete = HTTPRequestSpec(url: url, method: .DELETE, headers: headers, tls: options.tls, headTimeout: .seconds(5))
                    delete.cookies = options.cookies
                    _ = try? await HTTPTransport.execute(delete, runtime: options.runtime)
                }
                run.cancelTask()
            })
        logger.debug("starting to poll \(Redaction.url(url))")
        try await runSession(generation: generation, run: run, ready: ready) {
            // The handshake goes out without waiting for the first poll to return.
            let handshake = Task { try await sender.send(HubHandshake.request(options.hubProtocol)) }
            var pipeline = InboundPipeline(connection: self, session: session, run: run, ready: ready)
            let timer = Task { await self.runTimers(session: session, run: run) }
            defer {
                timer.cancel()
                handshake.cancel()
            }
            var first = true
            while true {
                try Task.checkCancellation()
                let pollURL = url + "&_=\(Int(Date().timeIntervalSince1970 * 1000))"
                var request = HTTPRequestSpec(
                    url: pollURL, method: .GET, headers: headers, tls: options.tls, headTimeout: options.serverTimeout + .seconds(30),
                    maxBodySize: options.maximumReceiveMessageSize)
                request.cookies = options.cookies
                let (head, body) = try await HTTPTransport.execute(request, runtime: options.runtime)
                if first {
                    first = false
                    if case .failure(let error) = await handshake.result { throw error }
                }
                switch head.status.code {
                case 200:
                    if body.readableBytes > 0, try await pipeline.feed(Array(buffer: body)) { return nil }
                case 204:
                    // The server ended the connection.
                    if run.closeRequest == nil { run.serverTerminated() }
                    return nil
                case 404:
                    throw RealtimeError(.connectionClosed, "the server no longer knows this connection (poll answered 404)", status: head.status)
                default:
                    throw RealtimeError.badStatus(head.status, url: url, body: String(buffer: body))
                }
            }
        }
    }

    /// Handles one message from the server; returns true when the connection must close.
    func handle(_ message: HubMessage, run: SessionRun) async throws -> Bool {
        switch message {
        case .ping, .ack, .sequence:
            return false
        case .invocation(let invocation):
            if let dispatcher = state.withLockedValue({ $0.dispatcher }) {
                await waitingForConsumer(full: dispatcher.isFull) { await dispatcher.send(invocation) }
            }
            return false
        case .streamItem(let item):
            if case .stream(let buffer)? = state.withLockedValue({ $0.pending[item.invocationId] }) {
                await waitingForConsumer(full: buffer.isFull) { await buffer.send(item.item) }
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

    /// Runs `body`, which waits when a bounded buffer is full; meanwhile the server timeout is
    /// paused (the silence is ours: we stopped reading).
    private func waitingForConsumer(full: Bool, _ body: () async -> Void) async {
        guard full else { return await body() }
        state.withLockedValue { $0.machine.readingPaused(true, now: timeline.now) }
        await body()
        state.withLockedValue { $0.machine.readingPaused(false, now: timeline.now) }
    }

    /// Handshake timeout, keep-alive pings and the server timeout, on the runtime's clock.
    func runTimers(session: Session, run: SessionRun) async {
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
                    try? await transmit(.ping, on: session)
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

/// The inbound half every transport shares: the handshake response, then framed messages, each
/// handled in order. Used by the one task that reads the transport.
struct InboundPipeline {
    let connection: HubConnection
    let session: HubConnection.Session
    let run: SessionRun
    let ready: OneShot<Void>
    private var handshakeBytes: [UInt8] = []
    private var framer: HubMessageFramer
    private var messages: [HubMessage] = []

    init(connection: HubConnection, session: HubConnection.Session, run: SessionRun, ready: OneShot<Void>) {
        self.connection = connection
        self.session = session
        self.run = run
        self.ready = ready
        framer = HubMessageFramer(connection.options.hubProtocol, maximumMessageSize: connection.options.maximumReceiveMessageSize)
    }

    /// A resumed socket (stateful reconnect) has no handshake.
    mutating func skipHandshake() { handshakeBytes = [] }

    /// Takes bytes from the server; returns true when the connection must close (a Close message).
    mutating func feed(_ input: [UInt8]) async throws -> Bool {
        var bytes = input
        let connection = connection
        connection.state.withLockedValue { $0.machine.didReceive(now: connection.timeline.now) }
        if !run.handshakeDone {
            handshakeBytes += bytes
            let response: HubHandshake.Response
            do { response = try HubHandshake.parseResponse(handshakeBytes) } catch {
                throw RealtimeError(.protocolViolation, "the server's handshake response is invalid: \(error)", underlying: error)
            }
            switch response {
            case .incomplete:
                return false
            case .refused(let error, _):
                throw RealtimeError(.refused, "the server refused the handshake: \(error)", serverMessage: error)
            case .accepted(let consumed):
                bytes = Array(handshakeBytes[consumed...])
                handshakeBytes = []
                let session = session
                let actions = connection.state.withLockedValue { shared -> [HubConnectionStateMachine.Action] in
                    shared.session = session
                    return shared.machine.connected(now: connection.timeline.now)
                }
                run.markHandshakeDone()
                ready.complete(.success(()))
                Task { await connection.perform(actions) }
            }
        }
        messages.removeAll(keepingCapacity: true)
        let codec = connection.codec
        do {
            try framer.consume(bytes) { (body) throws(HubProtocolError) in messages.append(try codec.decode(body: body)) }
        } catch {
            throw RealtimeError(.protocolViolation, "the server sent an invalid \(connection.options.hubProtocol) message: \(error)", underlying: error)
        }
        guard let replay = connection.state.withLockedValue({ $0.replay }) else {
            for message in messages where try await connection.handle(message, run: run) { return true }
            return false
        }
        for message in messages {
            switch message {
            case .ack(let id):
                replay.ack(id)
                continue
            case .sequence(let id):
                _ = replay.receive(message)
                try replay.sequence(id)
                continue
            default:
                break
            }
            let (process, scheduleAck) = replay.receive(message)
            if scheduleAck { connection.scheduleAck(replay) }
            if process, try await connection.handle(message, run: run) { return true }
        }
        return false
    }
}

extension HubConnection {
    /// Acknowledges what was received about a second from now (one Ack for a burst).
    func scheduleAck(_ replay: ReplayBuffer) {
        Task {
            try? await timeline.sleep(until: timeline.now + .seconds(1))
            guard let id = replay.takeAck(), let session = state.withLockedValue({ $0.session }) else { return }
            try? await transmit(.ack(sequenceId: id), on: session)
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
        var terminated = false
    }

    private let state = NIOLockedValueBox(State())

    var handshakeDone: Bool { state.withLockedValue { $0.handshakeDone } }
    /// The server sent a Close message: the connection is over, whatever the transport does.
    var closedByServerMessage: Bool { state.withLockedValue { $0.serverClose != nil } }
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

    /// Long polling's 204: the server ended the connection.
    func serverTerminated() { state.withLockedValue { $0.terminated = true } }

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
            if state.terminated {
                return (RealtimeError(.connectionClosed, "the server ended the connection (long polling answered 204)"), true)
            }
            return (transportError ?? RealtimeError(.connectionClosed, "the server closed the connection"), true)
        }
    }
}
