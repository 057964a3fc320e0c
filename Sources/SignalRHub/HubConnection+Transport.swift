import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
@_spi(RealtimeEngine) import RealtimeCore
import Tracing

extension HubConnection {
    /// Negotiates (unless skipped), picks a transport and completes the handshake. Returns once the
    /// connection is usable; the transport then runs in its own task until it ends.
    ///
    /// Transports are tried in the order WebSockets, Server-Sent Events, Long Polling, among those
    /// the app allows and the server offers with the protocol's transfer format (MessagePack needs
    /// Binary, so never Server-Sent Events). When one fails to connect, the next is tried after a
    /// new negotiate (the failed attempt may have used up the connection token), as the reference
    /// clients do. A refused handshake or negotiate ends the start without trying others.
    ///
    /// The whole connect (negotiate, transport, handshake) first waits its turn among the set-ups to
    /// the hub's host (``HTTPConnectionOptions/maxConnectingPerHost``, within the HTTP connect
    /// timeout): thousands of connections started at once then set up a bounded number at a time,
    /// and the memory a connect uses while under way is reused instead of left scattered between
    /// the open connections. `stop()` withdraws a waiting connect.
    func openTransport() async throws {
        let runtime = options.runtime
        guard let endpoint = try? Endpoint(options.url, allowedSchemes: ["http", "https", "ws", "wss"]) else {
            return try await openTransportNow()
        }
        let host = "\(endpoint.host):\(endpoint.port)"
        let limit = runtime.http.maxConnectingPerHost
        let timeout = runtime.http.connectTimeout
        try await runtime.setUpLimiter.withSlot(
            host: host, limit: limit, within: timeout, timers: runtime.timers,
            timeoutError: RealtimeError.timeout(
                "the connection to \(Redaction.url(options.url)) did not get its turn to set up within \(timeout) (\(limit) set-ups to that host were under way)"),
            waiting: { [weak self] id in self?.state.withLockedValue { $0.setUpWait = id.map { (host, $0) } } }
        ) { try await openTransportNow() }
    }

    private func openTransportNow() async throws {
        let reconnecting = state.withLockedValue { if case .reconnecting = $0.machine.state { true } else { false } }
        // One span per connect: negotiate, each transport tried (and the fallbacks) and the handshake
        // are its events; every request it makes carries its propagation headers.
        let span = options.runtime.startClientSpan("realtime.connect", protocol: "signalr", client: options.clientLabel)
        span.attributes["realtime.reconnect"] = reconnecting
        defer { span.end() }
        do {
            try await span.withContextBound { try await openTransport(span: span) }
            span.addEvent("handshake")
        } catch {
            span.fail(error)
            throw error
        }
    }

    private func openTransport(span: any Span) async throws {
        var bearer = try await options.accessTokenProvider?()
        if bearer?.isEmpty == true { bearer = nil }
        if options.skipNegotiation {
            guard options.transports == .webSockets else {
                throw RealtimeError(.refused, "skipNegotiation works only with transports == .webSockets")
            }
            var headers = options.httpHeaders
            if let bearer { headers.replaceOrAdd(name: "Authorization", value: "Bearer \(bearer)") }
            let outbox = HubOutbox(replay: nil)
            state.withLockedValue {
                $0.replay = nil
                $0.outbox = outbox
                $0.resume = nil
            }
            try await openWebSocket(url: options.url, headers: headers, outbox: outbox)
            return
        }
        let format = options.hubProtocol.transferFormat
        var failures: [String] = []
        var lastError: RealtimeError?
        var tried: HttpTransportType = []
        while true {
            span.addEvent("negotiate")
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
            span.addEvent(SpanEvent(name: "transport", attributes: ["realtime.transport": .string(transport.negotiateName)]))
            var headers = options.httpHeaders
            if let token { headers.replaceOrAdd(name: "Authorization", value: "Bearer \(token)") }
            let url = Negotiation.transportURL(result.url, connectionToken: result.connectionToken)
            // Stateful reconnect needs the server's agreement and a WebSocket.
            let stateful = result.useStatefulReconnect && transport == .webSockets
            let replay = stateful ? ReplayBuffer(limit: options.statefulReconnectBufferSize) : nil
            let outbox = HubOutbox(replay: replay, propagatesContext: transport != .webSockets)
            state.withLockedValue {
                $0.replay = replay
                $0.outbox = outbox
                $0.resume = stateful ? StatefulResume(driver: ReconnectDriver(policy: Self.statefulReconnectPolicy, runtime: options.runtime)) : nil
            }
            do {
                switch transport {
                case .webSockets: try await openWebSocket(url: url, headers: headers, outbox: outbox)
                case .serverSentEvents: try await openServerSentEvents(url: url, headers: headers, outbox: outbox)
                default: try await openLongPolling(url: url, headers: headers, outbox: outbox)
                }
                return
            } catch {
                let failure = Self.realtimeError(error)
                // A refused handshake is the hub's answer, not the transport's failure.
                if failure.code == .refused || failure.code == .cancelled { throw failure }
                span.addEvent(SpanEvent(
                    name: "fallback", attributes: ["realtime.transport": .string(transport.negotiateName), "realtime.error_code": .string("\(failure.code)")]))
                logger.debug(
                    "transport failed, trying the next",
                    metadata: ["realtime.transport": "\(transport.negotiateName)", "realtime.error_code": "\(failure.code)"])
                failures.append("\(transport.negotiateName): \(failure.detail)")
                lastError = failure
            }
        }
    }

    /// Delays before each attempt to replace a lost WebSocket statefully.
    static let statefulReconnectDelays: [Duration] = [.zero, .milliseconds(250), .seconds(1), .seconds(2)]

    /// Stateful reconnect's rule: the delays above, and a re-attached socket that drops within
    /// 5 s before it proved itself (`InboundPipeline.proven()`) counts as a failed attempt, so a
    /// server (or network) that takes each new socket and drops it at once ends the connection
    /// after four attempts instead of getting the replay buffer resent in a loop.
    static let statefulReconnectPolicy = ReconnectPolicy(
        backoff: .fixed(statefulReconnectDelays), reachability: AlwaysReachable(), shouldRetry: { _ in true }, stableAfter: .seconds(5))

    /// The transport in use (nil when not connected).
    public var transport: HttpTransportType? { state.withLockedValue { $0.session?.transport } }

    private func nextGeneration() -> Int {
        state.withLockedValue { shared -> Int in
            shared.generation += 1
            return shared.generation
        }
    }

    /// Runs `body` (the transport's reader) in its own task; returns once the handshake is done.
    ///
    /// The task is unstructured: `start()` (the official client's shape) returns once connected,
    /// while the reader goes on; `stop()` and the transport's end cancel it. It is a task of its
    /// own (``ownTask``): the graceful shutdown of whatever service called `start()` must not
    /// close the WebSocket under the connection.
    private func runSession(
        generation: Int, run: SessionRun, ready: OneShot<Void>, resume: (@Sendable () async throws -> Void)? = nil,
        _ body: @escaping @Sendable () async throws -> WebSocketCloseInfo?
    ) async throws {
        // Unstructured, for the reason in this function's comment: start() returns while it runs.
        let task = ownTask {
            // This closure's frame lives as long as the transport: what the end means is worked
            // out in functions of their own, whose frames exist only then.
            let endError: RealtimeError?
            do {
                endError = Self.endError(closeInfo: try await body(), run: run)
            } catch {
                endError = Self.endError(error, run: run)
            }
            await self.sessionEnded(generation: generation, run: run, ready: ready, resume: resume, endError: endError)
        }
        run.setTask(task)
        // Cancelling the caller (a stop() ending a reconnect or resume attempt) ends the session
        // being opened: a connect hanging in the network does not hold the caller until its timeout.
        try await withTaskCancellationHandler {
            try await ready.value()
        } onCancel: {
            run.cancelTask()
        }
    }

    /// A close frame other than 1000 that the client did not ask for is an error.
    private static func endError(closeInfo: WebSocketCloseInfo?, run: SessionRun) -> RealtimeError? {
        guard let closeInfo, closeInfo.code != 1000, run.closeRequest == nil else { return nil }
        return RealtimeError(.webSocketClosed, "the server closed the WebSocket with code \(closeInfo.code)", closeCode: closeInfo.code)
    }

    private static func endError(_ error: any Error, run: SessionRun) -> RealtimeError {
        if let error = error as? RealtimeError { return error }
        // After the handshake an I/O error is a lost connection, not a failed connect.
        return run.handshakeDone
            ? RealtimeError(.connectionClosed, "the connection was lost: \(Redaction.describe(error))", underlying: error)
            : realtimeError(error)
    }

    /// The transport ended: a failed handshake, a stateful resume, or the end of the connection.
    @inline(never)
    private func sessionEnded(
        generation: Int, run: SessionRun, ready: OneShot<Void>, resume: (@Sendable () async throws -> Void)?, endError: RealtimeError?
    ) async {
        if !run.handshakeDone {
            ready.complete(.failure(endError ?? RealtimeError(.connectionClosed, "the server closed the connection during the handshake")))
            return
        }
        let (error, allowReconnect) = run.outcome(transportError: endError)
        // Stateful reconnect: a lost WebSocket (not a Close message, not stop()) is replaced by
        // a new one with the same connection id; pending calls wait, nothing is lost or doubled.
        if let error, allowReconnect, !run.closedByServerMessage, let resume {
            let began = state.withLockedValue { shared -> (ReconnectDriver, ReplayBuffer)? in
                guard let replay = shared.replay, let driver = shared.resume?.driver, shared.machine.resumeBegan() else { return nil }
                shared.resume?.loss = ResumeLoss(generation: generation, error: error, allowReconnect: allowReconnect, resume: resume)
                shared.resume?.gaveUp = false
                return (driver, replay)
            }
            if let (driver, replay) = began {
                replay.disconnected()
                self.logger.debug("WebSocket lost, reconnecting statefully", metadata: ["realtime.error_code": "\(error.code)", "realtime.error": "\(error.detail)"])
                // The reference clients try once; we make up to four attempts (a network that is
                // still flapping), well within the server's wait (30 s by default in ASP.NET Core),
                // counted across new sockets that drop again before they proved themselves. The
                // driver's deadlines make them due (``resumerSaid(_:)``).
                driver.ended(.dropped(error, minimumDelay: nil))
                await endIfTheResumeGaveUp()
                return
            }
        } else if let error {
            self.logger.debug(
                "transport ended without a stateful reconnect",
                metadata: [
                    "realtime.error": "\(error.detail)", "realtime.allow_reconnect": "\(allowReconnect)",
                    "realtime.close_message": "\(run.closedByServerMessage)", "realtime.stateful": "\(resume != nil)",
                ])
        }
        await self.transportEnded(generation: generation, error: error, allowReconnect: allowReconnect)
    }

    /// What stateful reconnect's driver says: a resume attempt is due, one failed, or it gave up.
    func resumerSaid(_ event: ReconnectDriver.Event) {
        switch event {
        case .connect(let attempt):
            // Attempt 0 is the connection's own socket, open already when the driver starts.
            guard attempt > 0 else { return }
            state.withLockedValue { shared in
                guard shared.machine.state == .resuming, let loss = shared.resume?.loss else { return }
                // Unstructured: it comes due on the driver's deadline, long after start() returned
                // (a connection started without run() has no task group to hold it). Kept under the
                // lock that made it due: a stop() cancels it and waits for it.
                shared.resume?.attempt = (attempt, ownTask { await self.resumeAttempt(attempt, loss) })
            }
        case .failed(let error, let willRetry):
            logger.debug(
                "stateful reconnect attempt failed",
                metadata: ["realtime.error": "\(error.detail)", "realtime.will_retry": "\(willRetry)"])
        case .finished:
            // Told while a loss or a failed attempt is told to the driver (or it is stopped):
            // that caller ends the connection (``endIfTheResumeGaveUp()``).
            state.withLockedValue { $0.resume?.gaveUp = true }
        }
    }

    /// One attempt to open a new socket for the connection (stateful reconnect); a failure is told
    /// to the driver, which makes the next one due or gives up.
    private func resumeAttempt(_ attempt: Int, _ loss: ResumeLoss) async {
        defer {
            // Let go of this attempt's task (not of a later attempt's).
            state.withLockedValue { if $0.resume?.attempt?.number == attempt { $0.resume?.attempt = nil } }
        }
        do {
            try await loss.resume()
        } catch {
            let failure = Self.realtimeError(error)
            guard let driver = state.withLockedValue({ $0.machine.state == .resuming ? $0.resume?.driver : nil }) else { return }
            driver.ended(.dropped(failure, minimumDelay: nil))
            await endIfTheResumeGaveUp()
        }
    }

    /// When stateful reconnect's driver gave up, the loss it was resuming ends the connection as a
    /// transport's end (a reconnect when a retry policy is set, else closed).
    private func endIfTheResumeGaveUp() async {
        let loss = state.withLockedValue { shared -> ResumeLoss? in
            guard shared.resume?.gaveUp == true, let loss = shared.resume?.loss else { return nil }
            shared.resume?.loss = nil
            shared.resume?.gaveUp = false
            return loss
        }
        guard let loss else { return }
        logger.debug("stateful reconnect gave up, the connection ends")
        await transportEnded(generation: loss.generation, error: loss.error, allowReconnect: loss.allowReconnect)
    }

    // MARK: WebSockets

    private func openWebSocket(url httpURL: String, headers: HTTPHeaders, outbox: HubOutbox, resuming: Int? = nil) async throws {
        var wsURL = httpURL
        if wsURL.hasPrefix("https://") { wsURL = "wss://" + wsURL.dropFirst(8) } else if wsURL.hasPrefix("http://") { wsURL = "ws://" + wsURL.dropFirst(7) }
        var configuration = WebSocketConfiguration(
            headers: headers, cookies: options.cookies, maxMessageSize: options.maximumReceiveMessageSize, autoPing: nil,
            connectTimeout: options.handshakeTimeout, tls: options.tls)
        // Opened inside a connect that holds the set-up slot for this host (openTransport()): the
        // connection task that opens the socket does not inherit the mark, so it is passed on.
        if let held = SetUpLimiter.heldHost, let endpoint = try? Endpoint(wsURL, allowedSchemes: ["ws", "wss"]) {
            configuration.setUpSlotHeld = held == "\(endpoint.host):\(endpoint.port)"
        }
        let generation = resuming ?? nextGeneration()
        let ready = OneShot<Void>()
        let run = SessionRun()
        let binary = options.hubProtocol == .messagePack
        // Pings both ways are handled on the event loop: an idle connection's keep-alive wakes no
        // task. The server's Ping (a frame holding exactly one) counts as heard, like any message.
        let ping = WebSocketProtocolPing.Message(codec.encode(.ping), binary: binary)
        configuration.protocolPing = WebSocketProtocolPing(peerPing: ping, ownPing: ping) { [weak self] in
            guard let self else { return true }
            self.state.withLockedValue { $0.machine.didReceive(now: self.timers.now) }
            self.metrics.received(messages: 1, bytes: ping.bytes.count)
            return true
        }
        let replay = outbox.replay
        var resume: (@Sendable () async throws -> Void)?
        if replay != nil {
            resume = { @Sendable in try await self.openWebSocket(url: httpURL, headers: headers, outbox: outbox, resuming: generation) }
        }
        logger.debug("opening the WebSocket", metadata: ["realtime.transport": "WebSockets", "realtime.url": "\(Redaction.url(wsURL))"])
        try await runSession(generation: generation, run: run, ready: ready, resume: resume) { [wsURL, resuming, configuration] in
            try await WebSocketTransport.connect(to: wsURL, runtime: self.options.runtime, configuration: { configuration }) { ws in
                // This closure's frame lives as long as the connection: the setup and the reading
                // are functions of their own.
                var (pipeline, writer) = try await self.startWebSocketSession(
                    ws, generation: generation, run: run, ready: ready, resuming: resuming, outbox: outbox, binary: binary)
                defer {
                    run.cancelTimers(self.timers)
                    writer.stop()
                    // Without stateful reconnect nothing outlives the socket: waiting sends fail now.
                    if outbox.replay == nil { outbox.close(RealtimeError(.connectionClosed, "the connection was lost before the message was sent")) }
                }
                try await self.readWebSocket(ws, pipeline: &pipeline)
            }
        }
    }

    /// A WebSocket's session: the outbox's writer, the handshake (or a stateful resume's rewind),
    /// the timers. Returns the inbound pipeline the reader feeds, and the writer to stop at the end.
    @inline(never)
    private func startWebSocketSession(
        _ ws: WebSocketConnection, generation: Int, run: SessionRun, ready: OneShot<Void>, resuming: Int?, outbox: HubOutbox,
        binary: Bool
    ) async throws -> (InboundPipeline, OutboxWebSocketWriter<HubFrame>) {
        // Written on the event loop as they are queued: 1,000 concurrent invocations go out in a
        // few flushes, with no task per write. A connection with permessage-deflate would have no
        // loop writer; a hub connection never asks for it.
        guard let loopWriter = ws.loopWriter else {
            throw RealtimeError(.protocolViolation, "the WebSocket has no event-loop writer (permessage-deflate is not offered by hub connections)")
        }
        let writer = outbox.webSocketWriter(loopWriter, binary: binary)
        let timers = self.timers
        let session = Session(
            generation: generation, transport: .webSockets, outbox: outbox,
            sendPing: { _ = ws.sendProtocolPing() },
            close: { error in
                run.requestClose(error)
                // An aborted connection (server timeout) does not wait for a closing
                // handshake the server will not answer: the session ends now.
                guard error == nil else { return run.cancelTask() }
                // A server that never answers the close frame: the transport closes the TCP
                // connection after closeTimeout, which ends the read.
                try? await ws.close(code: 1000, reason: nil)
            },
            run: run)
        var pipeline = InboundPipeline(connection: self, session: session, run: run, ready: ready)
        if resuming != nil, let replay = outbox.replay {
            // The same connection on a new socket: no handshake; Sequence, then every message the
            // server has not acknowledged, then what was queued meanwhile, then normal sending.
            let codec = self.codec
            let resumer = self.state.withLockedValue { shared -> ReconnectDriver?? in
                // A stop() that came first ended the resume: this socket closes unused.
                guard shared.machine.resumed(now: timers.now).isEmpty else { return .none }
                shared.session = session
                shared.statefulReconnects += 1
                return .some(shared.resume?.driver)
            }
            guard let resumer else { throw RealtimeError(.cancelled, "the connection was stopped while it was resuming") }
            let ack = replay.resume(outbox.queue, sequenceMessage: { codec.encode(.sequence(sequenceId: $0)) })
            if let ack { outbox.post(codec.encode(.ack(sequenceId: ack))) }
            writer.start()
            resumer?.opened()
            run.markHandshakeDone()
            self.armKeepAlive(session: session, run: run)
            pipeline.resumed(lastResentId: replay.lastSentId)
            ready.complete(.success(()))
        } else {
            // Version 2 carries Ack and Sequence; it is asked for only with stateful reconnect,
            // so servers that know version 1 only keep working (as the reference clients do).
            let version = outbox.replay == nil ? 1 : 2
            try await ws.send(text: String(decoding: HubHandshake.request(self.options.hubProtocol, version: version), as: UTF8.self))
            writer.start()
        }
        self.startTimers(session: session, run: run)
        return (pipeline, writer)
    }

    /// Reads the WebSocket into the pipeline until it ends.
    @inline(never)
    private func readWebSocket(_ ws: WebSocketConnection, pipeline: inout InboundPipeline) async throws {
        var inbound = ws.inbound.makeAsyncIterator()
        while let messages = try await inbound.nextRead() {
            // By index: each message is read in place, not copied out of the batch.
            for index in messages.indices {
                let outcome = try messages[index].bytes.withUnsafeReadableBytes { try pipeline.feed($0) }
                switch outcome {
                case .goOn: break
                case .close: try? await ws.close(code: 1000, reason: nil)
                case .paused: await self.waitForConsumers()
                }
            }
        }
    }

    // MARK: HTTP sends (Server-Sent Events and Long Polling)

    /// Sends one POST of outgoing messages (the outbox's ``HubOutbox/postLoop(_:)`` calls it one
    /// request at a time, with everything queued meanwhile).
    private func poster(url: String, headers: HTTPHeaders) -> @Sendable (ByteBuffer) async throws -> Void {
        let options = options
        return { body in
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

    /// Runs `body` (an HTTP transport's reader) beside the outbox's POST loop; at its end the loop
    /// stops and sends still waiting fail.
    private func withPostLoop<Result: Sendable>(
        _ outbox: HubOutbox, url: String, headers: HTTPHeaders, _ body: () async throws -> Result
    ) async throws -> Result {
        let post = poster(url: url, headers: headers)
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await outbox.postLoop(post) }
            defer {
                group.cancelAll()
                outbox.close(RealtimeError(.connectionClosed, "the connection was lost before the message was sent"))
            }
            return try await body()
        }
    }

    // MARK: Server-Sent Events

    private func openServerSentEvents(url: String, headers: HTTPHeaders, outbox: HubOutbox) async throws {
        let generation = nextGeneration()
        let ready = OneShot<Void>()
        let run = SessionRun()
        var streamHeaders = headers
        streamHeaders.replaceOrAdd(name: "Accept", value: "text/event-stream")
        var request = HTTPRequestSpec(url: url, method: .GET, headers: streamHeaders, tls: options.tls, headTimeout: options.handshakeTimeout)
        request.cookies = options.cookies
        let session = Session(
            generation: generation, transport: .serverSentEvents, outbox: outbox,
            close: { error in
                run.requestClose(error)
                run.cancelTask()
            },
            run: run)
        logger.debug("opening the event stream", metadata: ["realtime.transport": "ServerSentEvents", "realtime.url": "\(Redaction.url(url))"])
        try await runSession(generation: generation, run: run, ready: ready) { [request] in
            try await self.withPostLoop(outbox, url: url, headers: headers) { try await self.readServerSentEvents(request, url: url, session: session, run: run, ready: ready) }
        }
    }

    /// Reads the event stream into the pipeline until it ends.
    private func readServerSentEvents(
        _ request: HTTPRequestSpec, url: String, session: Session, run: SessionRun, ready: OneShot<Void>
    ) async throws -> WebSocketCloseInfo? {
        let maximum = options.maximumReceiveMessageSize
        let outbox = session.outbox
    // The pipeline lives on the stream's event loop: every event is fed there, in order.
        let pipeline = NIOLockedValueBox(InboundPipeline(connection: self, session: session, run: run, ready: ready))
        let stream = try EventStream.open(
            request, runtime: self.options.runtime, options: EventStreamOptions(maxEventSize: maximum),
            onHead: { head in
                guard head.status.code == 200 else {
                    let status = head.status
                    return .refuse { _ in RealtimeError.badStatus(status, url: url) }
                }
                guard head.mediaType == "text/event-stream" else {
                    let error = RealtimeError(
                        .badContentType, "the Server-Sent Events stream \(Redaction.url(url)) has content type \(head.mediaType ?? "none")")
                    return .refuse { _ in error }
                }
                return .accept
            },
            onOutputs: { outputs in
                do {
                    for case .event(let event) in outputs {
                        var data = event.data
                        let outcome = try pipeline.withLockedValue { pipeline in
                            try data.withUTF8 { try pipeline.feed(UnsafeRawBufferPointer($0)) }
                        }
                        switch outcome {
                        case .goOn: continue
                        case .close:
                            run.requestClose(nil)
                            run.cancelTask()
                            return false
                        case .paused: return !self.readGate.isClosed
                        }
                    }
                } catch {
                    run.recordFailure(error)
                    run.cancelTask()
                    return false
                }
                return true
            })
        self.readGate.setOnOpen { stream.resume() }
        do {
            try await withTaskCancellationHandler {
                try await stream.accepted()
                try await outbox.send(HubHandshake.request(self.options.hubProtocol))
                self.startTimers(session: session, run: run)
                _ = try await stream.finished()
            } onCancel: {
                stream.cancel()
            }
        } catch let error as RealtimeError where error.code == .messageTooLarge {
            throw RealtimeError(.messageTooLarge, "a Server-Sent Event exceeds maximumReceiveMessageSize (\(maximum) bytes)", underlying: error)
        } catch {
            if let failure = run.failure { throw failure }
            if run.closeRequest != nil || run.closedByServerMessage { return nil }
            throw error
        }
        run.cancelTimers(self.timers)
        if let failure = run.failure { throw failure }
        return nil
    }

    // MARK: Long Polling

    private func openLongPolling(url: String, headers: HTTPHeaders, outbox: HubOutbox) async throws {
        let generation = nextGeneration()
        let ready = OneShot<Void>()
        let run = SessionRun()
        let options = options
        let session = Session(
            generation: generation, transport: .longPolling, outbox: outbox,
            close: { error in
                run.requestClose(error)
                if error == nil {
                    // DELETE ends the server's side; it answers the pending poll with 204.
                    var delete = HTTPRequestSpec(url: url, method: .DELETE, headers: headers, tls: options.tls, headTimeout: .seconds(5))
                    delete.cookies = options.cookies
                    _ = try? await HTTPTransport.execute(delete, runtime: options.runtime)
                }
                run.cancelTask()
            },
            run: run)
        logger.debug("starting to poll", metadata: ["realtime.transport": "LongPolling", "realtime.url": "\(Redaction.url(url))"])
        try await runSession(generation: generation, run: run, ready: ready) {
            try await self.withPostLoop(outbox, url: url, headers: headers) {
                try await self.poll(url: url, headers: headers, session: session, run: run, ready: ready)
            }
        }
    }

    /// Polls into the pipeline until the session ends.
    private func poll(url: String, headers: HTTPHeaders, session: Session, run: SessionRun, ready: OneShot<Void>) async throws -> WebSocketCloseInfo? {
        let options = options
        // The handshake goes out beside the first poll (whose answer carries the reply): queued
        // now, and awaited before that answer is handled.
        let handshake = session.outbox.queueAwaitingWrite(HubHandshake.request(options.hubProtocol))
        let pipeline = InboundPipeline(connection: self, session: session, run: run, ready: ready)
        self.startTimers(session: session, run: run)
        defer { run.cancelTimers(self.timers) }
        // The pipeline is fed on one poll at a time (the loop has one in flight).
        let pipelineBox = NIOLockedValueBox(pipeline)
        let first = NIOLockedValueBox(true)
        let poller = LongPoller(
            runtime: options.runtime,
            makeRequest: {
                let pollURL = url + "&_=\(Int(Date().timeIntervalSince1970 * 1000))"
                var request = HTTPRequestSpec(
                    url: pollURL, method: .GET, headers: headers, tls: options.tls, headTimeout: Self.pollTimeout,
                    maxBodySize: options.maximumReceiveMessageSize)
                request.cookies = options.cookies
                return request
            },
            handleResponse: { head, body in
                let isFirst = first.withLockedValue { value in
                    defer { value = false }
                    return value
                }
                if isFirst { try await handshake.value() }
                switch head.status.code {
                case 200:
                    guard body.readableBytes > 0 else { return .next }
                    let outcome = try pipelineBox.withLockedValue { pipeline in
                        try body.withUnsafeReadableBytes { try pipeline.feed($0) }
                    }
                    switch outcome {
                    case .goOn: return .next
                    case .close: return .stop
                    case .paused:
                        await self.waitForConsumers()
                        return .next
                    }
                case 204:
                    // The server ended the connection.
                    if run.closeRequest == nil { run.serverTerminated() }
                    return .stop
                case 404:
                    throw RealtimeError(.connectionClosed, "the server no longer knows this connection (poll answered 404)", status: head.status)
                default:
                    throw RealtimeError.badStatus(head.status, url: url, body: String(buffer: body))
                }
            })
        try await poller.run()
        return nil
    }

    /// Handles one message from the server, on the reading side (an event loop for the WebSocket
    /// and Server-Sent Events transports): hands invocations and stream items to their consumers'
    /// buffers, completes calls. Returns `.close` for a Close message, `.paused` when a consumer's
    /// buffer is full (reading must wait for ``waitForConsumers()`` or the read gate).
    /// An invocation is added to `invocations`, which the caller hands to `dispatcher` (the
    /// connection's, taken once per read) at the end of the read (``dispatch(_:to:)``); a Close
    /// hands them over first. `message` is consumed (a copy of a hub message copies its headers'
    /// table too).
    func handle(_ message: consuming HubMessage, run: SessionRun, dispatcher: InboundBuffer<Dispatched>?,
                invocations: inout [Dispatched]) -> InboundPipeline.Outcome {
        switch consume message {
        case .ping, .ack, .sequence:
            return .goOn
        case .invocation(let invocation):
            invocations.append(.invocation(invocation))
            return .goOn
        case .streamItem(let item):
            guard case .stream(let buffer)? = state.withLockedValue({ $0.machine.pendingCall(item.invocationId) }) else { return .goOn }
            if buffer.append(item.item) { return .goOn }
            readGate.pause(for: buffer)
            return .paused
        case .completion(let completion):
            let result: Result<JSONValue?, any Error> = switch completion.outcome {
            case .void: .success(nil)
            case .result(let value): .success(value)
            case .error(let text): .failure(HubInvocationError(message: text))
            }
            guard let pending = state.withLockedValue({ $0.machine.callEnded(completion.invocationId) }) else { return .goOn }
            switch pending {
            case .invocation(let reply): reply.complete(result)
            case .stream(let buffer):
                if case .failure(let error) = result { buffer.finish(throwing: error) } else { buffer.finish() }
            }
            return .goOn
        case .streamInvocation:
            logger.debug("ignored a message a client does not serve", metadata: ["realtime.message_type": "4"])
            return .goOn
        case .cancelInvocation:
            logger.debug("ignored a message a client does not serve", metadata: ["realtime.message_type": "5"])
            return .goOn
        case .close(let close):
            // The invocations read before the Close are handled before the connection ends.
            _ = dispatch(&invocations, to: dispatcher)
            run.serverClosed(close)
            return .close
        }
    }

    /// Hands a read's invocations to the dispatcher in one batch (one lock, one wake-up); without a
    /// dispatcher (none is running) they are dropped, as one at a time.
    func dispatch(_ invocations: inout [Dispatched], to dispatcher: InboundBuffer<Dispatched>?) -> InboundPipeline.Outcome {
        guard !invocations.isEmpty else { return .goOn }
        var batch: [Dispatched] = []
        swap(&batch, &invocations)
        guard let dispatcher else { return .goOn }
        if dispatcher.append(batch: batch) { return .goOn }
        readGate.pause(for: dispatcher)
        return .paused
    }

    /// Waits until the consumers that filled their buffers have caught up; meanwhile the server
    /// timeout is paused (the silence is ours: we stopped reading).
    func waitForConsumers() async {
        guard readGate.isClosed else { return }
        state.withLockedValue { $0.machine.readingPaused(true, now: timers.now) }
        await readGate.waitUntilOpen()
        state.withLockedValue { $0.machine.readingPaused(false, now: timers.now) }
    }

    /// The handshake deadline, then keep-alive pings and the server timeout, as deadlines on the
    /// runtime's clock (no task waits for them).
    /// How long a poll may wait for its answer: ASP.NET Core holds a poll for up to 90 s when it
    /// has nothing to send; 100 s, as the TypeScript client.
    static let pollTimeout: Duration = .seconds(100)

    func startTimers(session: Session, run: SessionRun) {
        let limit = options.handshakeTimeout
        run.setHandshakeTimer(timers.schedule(after: limit) { [weak self] in
            guard let self, !run.handshakeDone else { return }
            session.abort(RealtimeError(.timeout, "the server did not answer the handshake within \(limit)"))
            _ = self
        })
    }

    /// Arms the keep-alive and server-timeout check at the state machine's next deadline (after
    /// the handshake).
    ///
    /// Not for long polling, as the TypeScript and .NET clients: its polls keep the connection
    /// alive by themselves and ASP.NET Core sends no Pings on it, so silence there is no sign of
    /// a lost server (a poll that fails or times out ends the connection instead).
    func armKeepAlive(session: Session, run: SessionRun) {
        if session.transport == .longPolling { return }
        guard let deadline = state.withLockedValue({ $0.machine.nextDeadline }) else { return }
        run.setKeepAliveTimer(timers.schedule(at: deadline) { [weak self] in self?.keepAliveFired(session: session, run: run) })
    }

    private func keepAliveFired(session: Session, run: SessionRun) {
        let actions = state.withLockedValue { shared -> [HubConnection.Lifecycle.Action]? in
            guard shared.session?.generation == session.generation, !run.isOver else { return nil }
            return shared.machine.timerFired(now: timers.now)
        }
        guard let actions else { return }
        for action in actions {
            switch action {
            case .sendPing:
                if let sendPing = session.sendPing, state.withLockedValue({ $0.replay?.isReconnecting != true }) {
                    // WebSockets: written on the event loop, between two frames, without waiting.
                    sendPing()
                    metrics.sent(messages: 1, bytes: encodedPingSize)
                } else {
                    // Queued without waiting: the timer queue's task must not wait on a socket.
                    transmitNow(.ping, on: session)
                }
            case .abortTransport(let error):
                session.abort(error)
                return
            default:
                break
            }
        }
        armKeepAlive(session: session, run: run)
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
    /// How many messages the last read brought (the next read's list starts with that room).
    private var lastReadCount = 0
    /// Stateful reconnect: until this socket proves it works (the server acknowledges a message
    /// sent after this id, or a new message from the server is processed), it counts as a failed
    /// attempt if it drops within 5 s. nil once proven, or without stateful reconnect.
    private var unprovenAfter: Int64?
    /// The connection carried a message of the application (reported to the lifecycle once).
    private var carriedMessage = false

    init(connection: HubConnection, session: HubConnection.Session, run: SessionRun, ready: OneShot<Void>) {
        self.connection = connection
        self.session = session
        self.run = run
        self.ready = ready
        framer = HubMessageFramer(connection.options.hubProtocol, maximumMessageSize: connection.options.maximumReceiveMessageSize)
    }

    /// Decoded messages still held (none between reads).
    var heldMessageCount: Int { messages.count }

    /// A resumed socket (stateful reconnect) has no handshake; it is proven by an Ack of a
    /// message after `lastResentId` or a new message from the server.
    mutating func resumed(lastResentId: Int64) {
        handshakeBytes = []
        unprovenAfter = lastResentId
    }

    private mutating func proven() {
        unprovenAfter = nil
        connection.state.withLockedValue { $0.resume?.driver }?.progressed()
    }

    /// What reading does after a feed.
    enum Outcome {
        case goOn
        /// A Close message (or a stop that won the race with the handshake): close the transport.
        case close
        /// A consumer's buffer is full: wait before reading on.
        case paused
    }

    /// Takes bytes from the server, synchronously (on the transport's reading side).
    mutating func feed(_ bytes: UnsafeRawBufferPointer) throws -> Outcome {
        let connection = connection
        if !run.handshakeDone {
            // (After the handshake, `feedMessages` notes the receipt under the lock it takes anyway.)
            connection.state.withLockedValue { $0.machine.didReceive(now: connection.timers.now) }
            handshakeBytes.append(contentsOf: bytes)
            let response: HubHandshake.Response
            do { response = try HubHandshake.parseResponse(handshakeBytes) } catch {
                throw RealtimeError(.protocolViolation, "the server's handshake response is invalid: \(error)", underlying: error)
            }
            switch response {
            case .incomplete:
                return .goOn
            case .refused(let error, _):
                throw RealtimeError(.refused, "the server refused the handshake: \(error)", serverMessage: error)
            case .accepted(let consumed):
                let rest = Array(handshakeBytes[consumed...])
                handshakeBytes = []
                let session = session
                let (actions, resumer) = connection.state.withLockedValue { shared in
                    shared.session = session
                    return (shared.machine.connected(now: connection.timers.now), shared.resume?.driver)
                }
                run.markHandshakeDone()
                if let resumer {
                    // Stateful reconnect's driver starts with this socket open (its attempt 0).
                    resumer.start { [weak connection] event in connection?.resumerSaid(event) }
                    resumer.opened()
                    unprovenAfter = 0
                }
                if actions.contains(where: { if case .reportOpened = $0 { true } else { false } }) { connection.driver.opened() }
                connection.armKeepAlive(session: session, run: run)
                ready.complete(.success(()))
                var close = false
                for action in actions {
                    switch action {
                    case .notifyReconnected: connection.state.withLockedValue { $0.dispatcher }?.yield(.reconnected)
                    case .closeTransport: close = true
                    default: break
                    }
                }
                if close { return .close }
                // Nothing after the handshake response in this read: nothing to feed (a feed notes
                // a receipt, which would be timed after `ready`, when the caller may have moved on).
                if rest.isEmpty { return .goOn }
                return try rest.withUnsafeBytes { try feedMessages($0) }
            }
        }
        return try feedMessages(bytes)
    }

    private mutating func feedMessages(_ bytes: UnsafeRawBufferPointer) throws -> Outcome {
        // Emptied when handled, not at the next read: an idle connection would hold the last
        // messages it received (their arguments, up to the maximum message size) until then.
        defer {
            lastReadCount = messages.count
            messages.removeAll(keepingCapacity: messages.capacity <= 16)
        }
        // Room for as many messages as the last read brought: a burst's reads are alike, and
        // growing the list element by element copied every message a few times per read.
        if lastReadCount > messages.capacity { messages.reserveCapacity(Swift.min(lastReadCount, 4096)) }
        let codec = connection.codec
        do {
            try framer.consume(bytes) { (body) throws(HubProtocolError) in messages.append(try codec.decode(body: body)) }
        } catch {
            throw RealtimeError(.protocolViolation, "the server sent an invalid \(connection.options.hubProtocol) message: \(error)", underlying: error)
        }
        connection.metrics.received(messages: messages.count, bytes: bytes.count)
        if !carriedMessage, messages.contains(where: \.isApplicationMessage) {
            // The connection proved stable: a reconnect that opened it is over (ConnectionStability).
            carriedMessage = true
            connection.driver.progressed()
        }
        var outcome = Outcome.goOn
        // One lock per read: the receipt noted (the server timeout), the replay buffer and the
        // dispatcher taken.
        let (replay, dispatcher) = connection.state.withLockedValue { shared in
            shared.machine.didReceive(now: connection.timers.now)
            return (shared.replay, shared.dispatcher)
        }
        // The read's invocations, handed to the dispatcher together at the end.
        var invocations: [HubConnection.Dispatched] = []
        guard let replay else {
            // Each message moved out of the list (emptied after) to be handled, not copied.
            for index in messages.indices {
                // Room for the rest of the read at its first invocation: a read without one (stream
                // items, a Ping) allocates nothing for it.
                if invocations.capacity == 0, case .invocation = messages[index] { invocations.reserveCapacity(messages.count - index) }
                switch connection.handle(messages.take(at: index, leaving: .ping), run: run, dispatcher: dispatcher, invocations: &invocations) {
                case .goOn: continue
                case .close: return .close
                case .paused: outcome = .paused
                }
            }
            if connection.dispatch(&invocations, to: dispatcher) == .paused { outcome = .paused }
            return outcome
        }
        for message in messages {
            switch message {
            case .ack(let id):
                replay.acknowledge(id, in: session.outbox.queue)
                if let after = unprovenAfter, id > after { proven() }
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
            guard process else { continue }
            if unprovenAfter != nil { proven() }
            switch connection.handle(message, run: run, dispatcher: dispatcher, invocations: &invocations) {
            case .goOn: continue
            case .close: return .close
            case .paused: outcome = .paused
            }
        }
        if connection.dispatch(&invocations, to: dispatcher) == .paused { outcome = .paused }
        return outcome
    }
}

extension HubConnection {
    /// Acknowledges what was received about a second from now (one Ack for a burst).
    func scheduleAck(_ replay: ReplayBuffer) {
        timers.schedule(after: .seconds(1)) { [weak self] in
            guard let self, let id = replay.takeAck(), let session = self.state.withLockedValue({ $0.session }) else { return }
            // Queued without waiting: the timer queue's task must not wait on a socket.
            self.transmitNow(.ack(sequenceId: id), on: session)
        }
    }
}

/// What happened to one transport session, from any task.
final class SessionRun: Sendable {
    private struct State {
        var handshakeDone = false
        var handshakeTimer: TimerQueue.Timer?
        var keepAliveTimer: TimerQueue.Timer?
        /// A failure found on the reading side outside the reader's task (an event stream's callback).
        var failure: RealtimeError?
        var over = false
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

    var failure: RealtimeError? { state.withLockedValue { $0.failure } }

    /// Whether the session has ended (its timers do nothing any more).
    var isOver: Bool { state.withLockedValue { $0.over } }

    func recordFailure(_ error: any Error) {
        let failure = (error as? RealtimeError) ?? RealtimeError(.protocolViolation, Redaction.describe(error), underlying: error)
        state.withLockedValue { if $0.failure == nil { $0.failure = failure } }
    }

    func setHandshakeTimer(_ timer: TimerQueue.Timer) {
        state.withLockedValue { $0.handshakeTimer = timer }
    }

    func setKeepAliveTimer(_ timer: TimerQueue.Timer) {
        state.withLockedValue { $0.keepAliveTimer = timer }
    }

    /// The session ended: its deadlines are dropped.
    func cancelTimers(_ timers: TimerQueue) {
        let (handshake, keepAlive) = state.withLockedValue { state in
            state.over = true
            defer {
                state.handshakeTimer = nil
                state.keepAliveTimer = nil
            }
            return (state.handshakeTimer, state.keepAliveTimer)
        }
        if let handshake { timers.cancel(handshake) }
        if let keepAlive { timers.cancel(keepAlive) }
    }

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
