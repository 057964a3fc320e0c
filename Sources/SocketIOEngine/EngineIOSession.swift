import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
@_spi(RealtimeEngine) import RealtimeCore

/// Told about what happens on one Engine.IO session, in order, from the session's reading task.
protocol EngineIODelegate: AnyObject, Sendable {
    /// The open packet arrived: the session can carry messages now.
    func engineIOOpened(_ handshake: EngineIOHandshake, transport: EngineIOOptions.Transport) async throws
    /// A message packet (text or binary).
    /// Synchronous: it runs on the reading task's path for every message, and an async call there
    /// would keep its frames in the session's task for the connection's whole life.
    func engineIOReceived(_ payload: EngineIOPacket.Payload) throws
    /// A text message packet's payload, as the bytes read from a WebSocket (UTF-8 when the
    /// connection checks it); not empty.
    func engineIOReceived(text: UnsafeRawBufferPointer) throws
    /// The session moved from polling to WebSocket.
    func engineIOUpgraded() async
    /// The server pinged (the pong is already queued).
    func engineIOPinged()
    /// Someone listens for ping events: pings then go through the reader (``engineIOPinged()``)
    /// instead of being answered on the event loop.
    var observesPings: Bool { get }
    /// The server refused these application frames (``EngineIOSession/PollingRefusal``): they are
    /// not sent again; `error` is why (`messageTooLarge` for a 413).
    func engineIORefused(_ frames: [EngineIOFrame], error: RealtimeError)
}

/// How a session ended when it did not fail.
enum EngineIOSessionEnd: Sendable, Equatable {
    /// We sent the close packet.
    case closedByClient
    /// The server sent a close packet.
    case closedByServer
}

/// One Engine.IO v4 session: handshake, polling and WebSocket transports, the upgrade between them,
/// the heartbeat, and close. A new session is made for every (re)connection.
final class EngineIOSession: Sendable {
    private enum ChildEnd: Sendable {
        case sessionOver(EngineIOSessionEnd)
        case keepGoing
    }

    private typealias Machine = EngineIOSessionMachine<CheckedContinuation<Bool, Never>, CheckedContinuation<Void, Never>>

    private struct State {
        var machine = Machine()
        /// The WebSocket in use, so a heartbeat failure can end a read that is waiting on it.
        var webSocket: WebSocketConnection?
        /// The heartbeat's deadline on the runtime's timer queue.
        var heartbeatTimer: TimerQueue.Timer?
        /// Engine.IO 3: when our next ping goes out.
        var pingTimer: TimerQueue.Timer?
        /// The open session's WebSocket ended under it (``webSocketWasLost``).
        var webSocketLost = false
        /// The most bytes a polling POST carries after the server answered one with 413 (below
        /// that POST's size); nil: the handshake's `maxPayload` only.
        var refusedPayloadLimit: Int?
    }

    /// How long polling is held for an unanswered probe at most (less when the server's
    /// pingTimeout / 4 is shorter): a loopback probe is answered in milliseconds, and a server's
    /// ping must not wait long for a GET to carry it.
    static let probeHold: Duration = .seconds(2)

    let options: EngineIOOptions
    let runtime: RealtimeRuntime
    /// The Engine.IO protocol revision: 4, or 3 (socket.io 2.x servers: the client pings, the
    /// payloads are length-prefixed, a binary WebSocket frame starts with its packet type).
    private let revision: Int
    private let urls: EngineIOURLs
    private let outbox: Outbox<EngineIOFrame>
    private let state = NIOLockedValueBox(State())
    /// Fails with the heartbeat's timeout; succeeds when the session moved to the WebSocket (the
    /// polling group then stops watching: the WebSocket's reader sees the failure itself).
    private let heartbeatOutcome = OneShot<Void>()
    private weak let delegateBox: (any EngineIODelegate)?

    /// The event loop the session's WebSocket runs on; its reading and writing tasks run there too.
    private let eventLoop: any EventLoop

    /// The manager's metrics: what the writers put on the wire.
    private let metrics: ClientMetrics?

    init(url: String, options: EngineIOOptions, runtime: RealtimeRuntime, delegate: any EngineIODelegate, metrics: ClientMetrics? = nil) throws {
        self.options = options
        self.revision = options.revision
        self.metrics = metrics
        self.outbox = Outbox(window: options.resendWindow, limit: options.sendQueueLimit)
        let eventLoop = runtime.eventLoopGroup.next()
        self.eventLoop = eventLoop
        self.runtime = runtime.pinned(to: eventLoop)
        self.urls = try EngineIOURLs(url: url, options: options)
        self.delegateBox = delegate
    }

    private var delegate: any EngineIODelegate {
        get throws {
            guard let delegate = delegateBox else { throw CancellationError() }
            return delegate
        }
    }

    var handshake: EngineIOHandshake? { state.withLockedValue { $0.machine.handshake } }

    /// The session failed because its open WebSocket ended without an Engine.IO close packet: a
    /// normal close (1000, 1001, 1005), an end with no close frame, or a reset. The JavaScript
    /// client calls that "transport close", not an error. Close codes that say why (1008, 1011...),
    /// a missed heartbeat, a protocol violation and polling failures are not.
    var webSocketWasLost: Bool { state.withLockedValue { $0.webSocketLost } }

    /// Records whether `error`, ending the session's WebSocket, is a lost connection
    /// (``webSocketWasLost``); returns it.
    private func noteWebSocketEnd(_ error: any Error) -> any Error {
        if let error = error as? RealtimeError, error.code == .connectionClosed {
            markWebSocketLost()
        }
        return error
    }

    /// The open session's WebSocket ended without an Engine.IO close packet and without an error
    /// of ours (a heartbeat that expired, a close we asked for).
    private func markWebSocketLost() {
        state.withLockedValue { state in
            guard state.machine.handshake != nil, state.machine.heartbeatFailure == nil, !state.machine.closeRequested else { return }
            state.webSocketLost = true
        }
    }
    var transport: EngineIOOptions.Transport { state.withLockedValue { $0.machine.transport } }

    /// Queues a frame for sending. Returns false once the session is over.
    @discardableResult
    func send(_ frame: EngineIOFrame) -> Bool { outbox.push(frame) }

    /// Queues an application frame unless the send queue is full (`sendQueueLimit` bytes).
    func trySend(_ frame: EngineIOFrame) -> Outbox<EngineIOFrame>.BoundedPush { outbox.pushBounded(frame) }

    /// Called when the send queue has room again after a `trySend` was refused.
    func onSendQueueDrained(_ callback: @escaping @Sendable () -> Void) { outbox.setOnDrain(callback) }

    /// Sends the close packet (once, however often this is called); ``run()`` returns
    /// ``EngineIOSessionEnd/closedByClient`` once it is written.
    func close() {
        guard state.withLockedValue({ $0.machine.closing() }) else { return }
        outbox.push(EngineIOFrame(packets: [EngineIOPacket(.close)], requeueNamespace: nil))
    }

    /// Ends the session for good and returns the frames written but not confirmed (WebSocket), then
    /// the frames never written.
    func collectUnsent() -> (written: [EngineIOFrame], unwritten: [EngineIOFrame]) { outbox.takeUnsent() }

    /// Emits that left the resend window unconfirmed, by namespace (``Outbox/evictedUnconfirmed``).
    var evictedUnconfirmed: [String: Int] { outbox.evictedUnconfirmed }

    /// The server acknowledged `ackID` on `namespace`: frames written up to it arrived.
    func confirmDelivery(namespace: String, ackID: Int) {
        outbox.confirm { $0.ackID == ackID && $0.requeueNamespace == namespace }
    }

    /// Runs the session until it ends. Throws ``RealtimeError`` when it fails (handshake, transport,
    /// heartbeat timeout, protocol violation).
    func run() async throws -> EngineIOSessionEnd {
        defer {
            sessionEnded()
            outbox.close()
        }
        switch options.transports.first ?? .polling {
        case .websocket:
            // The WebSocket's connection runs on its event loop (the session's: the runtime is
            // pinned to it); a second preference here would cost the idle connection's task a
            // frame and a record for its whole life.
            return try await runWebSocketOnly()
        case .polling:
            return try await withEventLoopPreference(eventLoop) { try await runPolling() }
        }
    }

    // MARK: Polling

    private func pollingRequest(method: HTTPMethod, body: String? = nil, handshake: EngineIOHandshake?) -> HTTPRequestSpec {
        var headers = options.headers
        if body != nil { headers.replaceOrAdd(name: "Content-Type", value: "text/plain;charset=UTF-8") }
        let headLimit = handshake.map { $0.pingInterval + $0.pingTimeout + .seconds(5) } ?? options.connectTimeout
        return HTTPRequestSpec(
            url: urls.polling(sid: handshake?.sid),
            method: method,
            headers: headers,
            body: body.map { ByteBuffer(string: $0) },
            tls: options.tls,
            headTimeout: headLimit,
            idleTimeout: headLimit,
            maxBodySize: options.maxMessageSize,
            cookies: options.cookies)
    }

    private func decodePolling(_ head: RealtimeCore.HTTPResponseHead, _ body: ByteBuffer) throws -> [EngineIOPacket] {
        guard head.status == .ok else {
            throw RealtimeError.badStatus(head.status, url: head.url, body: String(buffer: body))
        }
        do {
            if revision == 3 { return try body.withUnsafeReadableBytes { bytes in try EngineIO3Codec.decodePayload(bytes) } }
            return try body.withUnsafeReadableBytes { bytes in try EngineIOCodec.decodePayload(bytes) }
        } catch {
            throw RealtimeError(.protocolViolation, "the server sent an invalid polling payload", underlying: error)
        }
    }

    private func runPolling() async throws -> EngineIOSessionEnd {
        let (head, body) = try await HTTPTransport.execute(pollingRequest(method: .GET, handshake: nil), runtime: runtime)
        var packets = try decodePolling(head, body)
        guard let first = packets.first, first.type == .open, case .text(let json) = first.payload else {
            throw RealtimeError(.protocolViolation, "the server's first polling answer is not an Engine.IO open packet")
        }
        let handshake = try Self.parseHandshake(json, revision: revision, assumedMaxPayload: options.assumedMaxPayload)
        packets.removeFirst()
        opened(handshake, on: .polling)
        try await delegate.engineIOOpened(handshake, transport: .polling)
        for packet in packets {
            if let end = try handle(packet) { return end }
        }
        let upgrade = options.upgrade && options.transports.contains(.websocket) && handshake.upgrades.contains("websocket")
        return try await withThrowingTaskGroup(of: ChildEnd.self) { group in
            group.addTask { try await self.pollingReader(handshake) }
            group.addTask { try await self.pollingWriter(handshake, generation: self.outbox.generation) }
            group.addTask { try await self.pollingHeartbeat() }
            if upgrade { group.addTask { try await self.upgradeToWebSocket(handshake) } }
            for try await end in group {
                if case .sessionOver(let reason) = end {
                    group.cancelAll()
                    return reason
                }
            }
            throw RealtimeError(.connectionClosed, "the Engine.IO session ended")
        }
    }

    /// The polling GETs, on the core's poll loop: one in flight; it parks while an upgrade is being
    /// probed and stops when the session moved to the WebSocket.
    private func pollingReader(_ handshake: EngineIOHandshake) async throws -> ChildEnd {
        let ended = NIOLockedValueBox<EngineIOSessionEnd?>(nil)
        let poller = LongPoller(
            runtime: runtime,
            makeRequest: { await self.parkIfPaused() ? nil : self.pollingRequest(method: .GET, handshake: handshake) },
            handleResponse: { head, body in
                for packet in try self.decodePolling(head, body) {
                    if let end = try self.handle(packet) {
                        ended.withLockedValue { $0 = end }
                        return .stop
                    }
                }
                return .next
            })
        try await poller.run()
        return ended.withLockedValue { $0 }.map { .sessionOver($0) } ?? .keepGoing
    }

    private func pollingWriter(_ handshake: EngineIOHandshake, generation: Int) async throws -> ChildEnd {
        // Engine.IO 3's records carry their length's digits: control packets (a ping, a close) are
        // sized as in revision 4, so a few bytes are kept free for them.
        let advertised = revision == 3 ? handshake.maxPayload - 64 : handshake.maxPayload
        while let batch = await outbox.take(
            maxBytes: max(min(advertised, state.withLockedValue { $0.refusedPayloadLimit } ?? .max), 1),
            maxParts: max(options.maxPacketsPerPoll, 1), generation: generation
        ) {
            let taken = sendingRefusedAlone(batch)
            // The close packet goes alone, once the POST with what came before it is answered (as
            // the JavaScript client sends it): a server reads the namespaces' DISCONNECTs before
            // the session ends. Nothing after it is sent.
            let closeIndex = taken.firstIndex(where: \.isClose)
            let frames = closeIndex.map { Array(taken[..<$0]) } ?? taken
            if !frames.isEmpty {
                do {
                    try await post(frames, handshake: handshake)
                } catch {
                    if let refusal = PollingRefusal(error) {
                        // Refused: sent again one by one, or dropped (never the same batch again).
                        // Nothing after the refused frames was sent: it goes back behind them.
                        outbox.requeueFront(settleRefused(frames, refusal) + taken[(closeIndex ?? taken.endIndex)...])
                        outbox.finishedWrite()
                        // A 413 is the server's (or its proxy's) word on the size: the session
                        // goes on with batches below this one. (A POST of control packets only
                        // that is refused ends the session, as any failed POST did.)
                        if refusal.tooLarge && frames.contains(where: \.isApplicationData) {
                            let size = frames.reduce(0) { $0 + $1.outboxSize }
                            state.withLockedValue { $0.refusedPayloadLimit = max(1, min($0.refusedPayloadLimit ?? .max, size - 1)) }
                            continue
                        }
                        throw error
                    }
                    // The server may have read the body before the request failed: what it carried is
                    // possibly delivered, like frames written to a WebSocket that broke.
                    outbox.wroteUnconfirmed(frames)
                    outbox.finishedWrite()
                    throw error
                }
                countSent(frames)
            }
            if let closeIndex {
                defer { outbox.finishedWrite() }
                try await post([taken[closeIndex]], handshake: handshake)
                return .sessionOver(.closedByClient)
            }
            outbox.finishedWrite()
        }
        return .keepGoing
    }

    /// One POST carrying `frames`; throws unless the server answered 2xx.
    private func post(_ frames: [EngineIOFrame], handshake: EngineIOHandshake) async throws {
        let payload = revision == 3 ? EngineIOFrame.pollingPayloadRevision3(frames) : EngineIOFrame.pollingPayload(frames)
        let request = pollingRequest(method: .POST, body: payload, handshake: handshake)
        let (head, body) = try await HTTPTransport.execute(request, runtime: runtime)
        guard (200..<300).contains(head.status.code) else {
            throw RealtimeError.badStatus(head.status, url: head.url, body: String(buffer: body))
        }
    }

    /// A polling POST the server refused: answered with a status that is not 2xx, or reset (or
    /// closed) under it. Not a refusal: a connect that failed, a timeout, a cancellation, and a 400
    /// saying the session is unknown (the session is over, not the batch).
    ///
    /// Every application frame of a refused POST counts one refusal. A frame with one is next sent
    /// in a POST of its own, so a refused batch is never sent again unchanged. A frame is dropped
    /// (``EngineIODelegate/engineIORefused(_:error:)``) when it is refused a second time, or when
    /// it was refused alone with a 4xx: the server said no to that frame. A reset or a 5xx alone
    /// is not that clear (a server restarting, a flaky network): such a frame is tried once more
    /// alone. So no frame is POSTed more than twice after a refusal. A reset or a 5xx leaves an
    /// emit with an ack as any cut does (possibly delivered, its ack fails with `connectionClosed`,
    /// not sent again): only a 4xx says the server did not handle it.
    struct PollingRefusal {
        /// What a dropped frame's ack fails with: `messageTooLarge` for a 413, else the failure.
        let error: RealtimeError
        /// 413: the POST was too large.
        let tooLarge: Bool
        /// A 4xx: the server refused what the POST carried.
        let definite: Bool

        init?(_ error: any Error) {
            guard let error = error as? RealtimeError else { return nil }
            switch error.code {
            case .connectionClosed:
                self.init(error: error, tooLarge: false, definite: false)
            case .badStatus:
                guard let status = error.status else { return nil }
                if status == .payloadTooLarge {
                    let tooLarge = RealtimeError(
                        .messageTooLarge, "the server refused the polling POST carrying the emit as too large (413)",
                        status: status, serverMessage: error.serverMessage)
                    self.init(error: tooLarge, tooLarge: true, definite: true)
                    return
                }
                // engine.io's and python-engineio's answer for a session they no longer have.
                if status == .badRequest && (error.serverMessage ?? "").contains("Session ID unknown") { return nil }
                self.init(error: error, tooLarge: false, definite: (400..<500).contains(status.code))
            default:
                return nil
            }
        }

        private init(error: RealtimeError, tooLarge: Bool, definite: Bool) {
            self.error = error
            self.tooLarge = tooLarge
            self.definite = definite
        }
    }

    /// A batch taken for a POST: a frame that was refused before goes alone; what follows it (or
    /// it, when others come first) goes back to the front of the queue for the next POST.
    private func sendingRefusedAlone(_ taken: [EngineIOFrame]) -> [EngineIOFrame] {
        guard taken.count > 1, let index = taken.firstIndex(where: { $0.refusals > 0 }) else { return taken }
        let end = index == 0 ? 1 : index
        outbox.requeueFront(Array(taken[end...]))
        return Array(taken[..<end])
    }

    /// The frames of a refused POST: each application frame counts the refusal; those to drop
    /// (``PollingRefusal``) go to the delegate, volatile emits are let go; returns what is sent
    /// again, in order (control frames included).
    private func settleRefused(_ frames: [EngineIOFrame], _ refusal: PollingRefusal) -> [EngineIOFrame] {
        let alone = frames.count(where: \.isApplicationData) == 1
        var again: [EngineIOFrame] = []
        var dropped: [EngineIOFrame] = []
        var unconfirmed: [EngineIOFrame] = []
        for var frame in frames {
            guard frame.isApplicationData else {
                again.append(frame)
                continue
            }
            if frame.isVolatile { continue }
            // An emit with an ack is sent at most once: after a reset or a 5xx the server may have
            // handled it, so it stays written and unconfirmed, and its ack fails with
            // `connectionClosed` when the session ends, as after any cut (it never loops).
            if !refusal.definite && frame.ackID != nil {
                unconfirmed.append(frame)
                continue
            }
            frame.refusals = frame.refusals == .max ? .max : frame.refusals + 1
            // The server may have read some of it (a reset): reported as possibly delivered.
            frame.wasWritten = true
            if frame.refusals >= 2 || (alone && refusal.definite) {
                dropped.append(frame)
            } else {
                again.append(frame)
            }
        }
        if !unconfirmed.isEmpty { outbox.wroteUnconfirmed(unconfirmed) }
        if !dropped.isEmpty {
            runtime.logger.debug(
                "Engine.IO polling POST refused; dropping its emits", metadata: ["realtime.dropped": "\(dropped.count)", "realtime.error": "\(refusal.error)"])
            delegateBox?.engineIORefused(dropped, error: refusal.error)
        }
        return again
    }

    /// Called by the polling reader before each GET: while an upgrade holds polling, parks and waits
    /// for the outcome. Returns true when the reader stops (the session moved to WebSocket or is over).
    private func parkIfPaused() async -> Bool {
        switch state.withLockedValue({ $0.machine.readerStep() }) {
        case .poll: return false
        case .stop: return true
        case .park: break
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (decision: CheckedContinuation<Bool, Never>) in
                // The upgrade may have ended since the check above: the machine answers at once then.
                switch state.withLockedValue({ $0.machine.readerParks(decision) }) {
                case .resume(let reader, let stop):
                    reader.resume(returning: stop)
                case .parked(let upgrade):
                    upgrade?.resume()
                    if Task.isCancelled { state.withLockedValue { $0.machine.readerCancelled() }?.resume(returning: true) }
                }
            }
        } onCancel: {
            // A cancelled reader stops waiting for the upgrade's outcome (the session is ending).
            state.withLockedValue { $0.machine.readerCancelled() }?.resume(returning: true)
        }
    }

    /// Holds polling: no new GET, no new POST; returns when the pending GET and POST are done, or
    /// at once when the task is cancelled (a reader that failed never parks).
    private func pausePolling() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (upgrade: CheckedContinuation<Void, Never>) in
                switch state.withLockedValue({ $0.machine.pausePolling(upgrade) }) {
                case .proceed(let upgrade): upgrade.resume()
                case .wait: if Task.isCancelled { state.withLockedValue { $0.machine.pauseCancelled() }?.resume() }
                }
            }
        } onCancel: {
            state.withLockedValue { $0.machine.pauseCancelled() }?.resume()
        }
        if Task.isCancelled { return }
        await outbox.pauseAndDrain()
    }

    // MARK: WebSocket

    /// Made inside the WebSocket's connect: the connection's task keeps the caller's frame for the
    /// connection's life.
    private func makeWebSocketConfiguration() -> WebSocketConfiguration {
        var configuration = WebSocketConfiguration(
            headers: options.headers,
            cookies: options.cookies,
            compression: options.compression,
            maxMessageSize: options.maxMessageSize,
            // Engine.IO has its own heartbeat.
            autoPing: nil,
            connectTimeout: options.connectTimeout,
            tls: options.tls)
        // The server's ping is answered on the event loop: an idle connection wakes no task. When
        // the application listens for ping events, pings take the reader's path, in order with
        // everything else.
        // Engine.IO 3: the client pings (queued like any packet), and the server's pong is what is
        // taken on the event loop.
        let revision3 = revision == 3
        configuration.protocolPing = WebSocketProtocolPing(
            peerPing: .init(Array((revision3 ? "3" : "2").utf8), binary: false),
            reply: revision3 ? nil : .init(Array("3".utf8), binary: false), ownPing: nil
        ) { [weak self] in
            guard let self, let delegate = try? self.delegate, !delegate.observesPings else { return false }
            self.pinged()
            return true
        }
        return configuration
    }

    /// Probes the WebSocket while polling goes on, then pauses polling, completes the upgrade and
    /// carries the rest of the session. A failed probe leaves the session on polling.
    private func upgradeToWebSocket(_ handshake: EngineIOHandshake) async throws -> ChildEnd {
        let upgraded = NIOLockedValueBox(false)
        let result = NIOLockedValueBox<ChildEnd>(.keepGoing)
        do {
            try await WebSocketTransport.connect(
                to: urls.websocket(sid: handshake.sid), runtime: runtime, configuration: makeWebSocketConfiguration
            ) { connection in
                var inbound = connection.inbound.makeAsyncIterator()
                // Pause polling first (spec order): no new GET; the server ends the pending one with
                // a noop once it sees the probe. A reader that had already started the next GET
                // would wait for that one until the server's next ping on a server that sends that
                // one noop (a race loopback under load shows).
                self.state.withLockedValue { $0.machine.probing() }
                // The hold is short: a probe that is not answered within it lets polling go on
                // while it is out, so the server's pings keep arriving (an unanswered probe, e.g.
                // through a proxy that passes the upgrade and no data, held them for
                // pingTimeout / 2 before). The probe itself is bounded, its write included.
                let probeTimeout = min(self.options.connectTimeout, handshake.pingTimeout / 2)
                let hold = self.runtime.timers.schedule(after: min(probeTimeout, handshake.pingTimeout / 4, Self.probeHold)) {
                    let (ended, reader) = self.state.withLockedValue { state in
                        (state.machine.phase == .probing, state.machine.probeHoldEnded())
                    }
                    if ended { self.runtime.logger.debug("Engine.IO upgrade probe not answered yet; polling goes on while it is out") }
                    reader?.resume(returning: false)
                }
                let (answer, timedOut): (RealtimeMessage?, Bool)
                do {
                    defer { self.runtime.timers.cancel(hold) }
                    (answer, timedOut) = try await self.nextMessage(&inbound, on: connection, within: probeTimeout, after: "2probe")
                } catch {
                    self.resumePollingAfterFailedUpgrade()
                    throw error
                }
                guard answer == .text("3probe") else {
                    // Polling goes on now, not after the WebSocket's closing handshake: on a busy
                    // machine that handshake took seconds more, and a hold past pingInterval +
                    // pingTimeout without a ping ended the session.
                    self.resumePollingAfterFailedUpgrade()
                    if timedOut { throw RealtimeError.timeout("no answer to the WebSocket probe within \(probeTimeout)") }
                    throw RealtimeError(.protocolViolation, "the server did not answer the WebSocket probe")
                }
                await self.pausePolling()
                try Task.checkCancellation()
                try await connection.send(text: "5")
                upgraded.withLockedValue { $0 = true }
                self.state.withLockedValue { $0.machine.upgraded() }?.resume(returning: true)
                self.heartbeatOutcome.complete(.success(()))
                let generation = self.outbox.resume(retireWriter: true)
                try await self.delegate.engineIOUpgraded()
                self.runtime.logger.debug("Engine.IO session upgraded to WebSocket")
                // nil: the server closed the WebSocket without a close packet; the transport throws
                // for a close code that says why, and a plain close is reported below.
                if let end = try await self.runWebSocket(connection, inbound: &inbound, generation: generation) {
                    result.withLockedValue { $0 = .sessionOver(end) }
                }
            }
        } catch {
            if upgraded.withLockedValue({ $0 }) { throw noteWebSocketEnd(error) }
            // Whatever happened, polling must not stay paused.
            resumePollingAfterFailedUpgrade()
            if error is CancellationError || Task.isCancelled { throw CancellationError() }
            runtime.logger.debug("Engine.IO WebSocket upgrade failed; staying on polling", metadata: ["realtime.error": "\(error)"])
            return .keepGoing
        }
        let end = result.withLockedValue { $0 }
        if case .keepGoing = end {
            // The server closed the WebSocket without a close packet.
            markWebSocketLost()
            throw RealtimeError(.connectionClosed, "the WebSocket closed without an Engine.IO close packet")
        }
        return end
    }

    /// The probe or the upgrade failed: the parked reader polls again and the writer goes on
    /// (called again by the cleanup, it finds nothing left to resume).
    private func resumePollingAfterFailedUpgrade() {
        state.withLockedValue { $0.machine.upgradeFailed() }?.resume(returning: false)
        outbox.resume(retireWriter: false)
    }

    /// The next WebSocket message, waiting at most `limit`: when it passes, the connection is
    /// aborted (which ends the wait at once, whether or not the server would answer a close frame)
    /// and the answer is nil with `timedOut` set.
    /// With `request`, that text is written first, within the same limit.
    private func nextMessage(
        _ inbound: inout WebSocketMessages.AsyncIterator, on connection: WebSocketConnection, within limit: Duration,
        after request: String? = nil
    ) async throws -> (message: RealtimeMessage?, timedOut: Bool) {
        let timedOut = NIOLockedValueBox(false)
        let timer = runtime.timers.schedule(after: limit) {
            timedOut.withLockedValue { $0 = true }
            connection.abort()
        }
        defer { runtime.timers.cancel(timer) }
        if let request {
            do {
                try await connection.send(text: request)
            } catch where timedOut.withLockedValue({ $0 }) {
                return (nil, true)
            }
        }
        let message = try await inbound.next()
        return (message, message == nil && timedOut.withLockedValue { $0 })
    }

    private func runWebSocketOnly() async throws -> EngineIOSessionEnd {
        let result = NIOLockedValueBox<EngineIOSessionEnd?>(nil)
        let connectTimeout = options.connectTimeout
        do {
            try await WebSocketTransport.connect(
                to: urls.websocket(sid: nil), runtime: runtime, configuration: makeWebSocketConfiguration
            ) { connection in
                // This closure's frame lives as long as the connection: the handshake is in a function
                // of its own, whose frame is gone once the session is open.
                var inbound = connection.inbound.makeAsyncIterator()
                try await self.openOverWebSocket(&inbound, on: connection, within: connectTimeout)
                // nil: the server closed the WebSocket without a close packet (reported below, or by
                // the transport with the server's close code).
                if let end = try await self.runWebSocket(connection, inbound: &inbound, generation: self.outbox.generation) {
                    result.withLockedValue { $0 = end }
                }
            }
        } catch {
            throw noteWebSocketEnd(error)
        }
        guard let end = result.withLockedValue({ $0 }) else {
            markWebSocketLost()
            throw RealtimeError(.connectionClosed, "the WebSocket closed without an Engine.IO close packet")
        }
        return end
    }

    /// Waits for the open packet of a WebSocket-only session and opens the session with it.
    @inline(never)
    private func openOverWebSocket(
        _ inbound: inout WebSocketMessages.AsyncIterator, on connection: WebSocketConnection, within connectTimeout: Duration
    ) async throws {
        let (first, timedOut) = try await nextMessage(&inbound, on: connection, within: connectTimeout)
        // Parsed in a synchronous function: the connection's task keeps this frame's size (its
        // stack's high-water mark) for the connection's life.
        let handshake = try openHandshake(first, timedOut: timedOut, within: connectTimeout)
        opened(handshake, on: .websocket)
        try await delegate.engineIOOpened(handshake, transport: .websocket)
    }

    /// The handshake in the first message of a WebSocket-only session.
    @inline(never)
    private func openHandshake(_ first: RealtimeMessage?, timedOut: Bool, within connectTimeout: Duration) throws -> EngineIOHandshake {
        guard let first else {
            if timedOut { throw RealtimeError.timeout("no Engine.IO open packet within \(connectTimeout)") }
            throw RealtimeError(.connectionClosed, "the WebSocket closed before the Engine.IO open packet")
        }
        guard case .text(let text) = first, let packet = try? EngineIOCodec.decode(text: text), packet.type == .open,
            case .text(let json) = packet.payload
        else {
            throw RealtimeError(.protocolViolation, "the server's first WebSocket message is not an Engine.IO open packet")
        }
        return try Self.parseHandshake(json, revision: revision, assumedMaxPayload: options.assumedMaxPayload)
    }

    /// Reads and writes over an open WebSocket until the session ends. The outbox is written from
    /// the event loop as frames are queued (no task waits for them), or, on a compressed
    /// connection, by a writer task. Returns nil when the server ended the WebSocket without a close
    /// packet: the transport then reports how it closed (the server's close code and reason, or
    /// 1006 without a close frame).
    // The functions on an open connection's path are kept apart (`@inline(never)`) and keep few
    // locals: merged, each frame would hold the locals of all of them for the connection's whole life.
    @inline(never)
    private func runWebSocket(
        _ connection: WebSocketConnection, inbound: inout WebSocketMessages.AsyncIterator, generation: Int
    ) async throws -> EngineIOSessionEnd? {
        let writer = try attachWebSocket(connection, generation: generation)
        // No batch is taken once the reader is done. One in flight settles before the WebSocket's
        // connect returns: its channel is closed by then, and closing fails every pending write on
        // the event loop first, so the session hands back what was not sent after it settled.
        defer { detachWebSocket(writer) }
        do {
            guard writer != nil else { return try await readAndWriteCompressed(connection, inbound: &inbound, generation: generation) }
            return try await readWebSocket(connection, inbound: &inbound)
        } catch {
            throw webSocketFailure(error)
        }
    }

    /// Records the open WebSocket (the heartbeat may have expired before: nothing closed it then)
    /// and starts writing the outbox from its event loop (nil for a compressed connection).
    @inline(never)
    private func attachWebSocket(_ connection: WebSocketConnection, generation: Int) throws -> OutboxWebSocketWriter<EngineIOFrame>? {
        let expired = state.withLockedValue { state -> RealtimeError? in
            state.webSocket = connection
            return state.machine.heartbeatFailure
        }
        if let expired {
            state.withLockedValue { $0.webSocket = nil }
            throw expired
        }
        return startLoopWriter(connection, generation: generation)
    }

    @inline(never)
    private func detachWebSocket(_ writer: OutboxWebSocketWriter<EngineIOFrame>?) {
        writer?.stop()
        state.withLockedValue { $0.webSocket = nil }
    }

    /// A missed heartbeat is why a WebSocket that failed ended.
    @inline(never)
    private func webSocketFailure(_ error: any Error) -> any Error {
        state.withLockedValue { $0.machine.heartbeatFailure } ?? error
    }

    /// The outbox is written from the event loop as frames are queued: no task waits for them.
    /// Nil for a compressed connection.
    private func startLoopWriter(_ connection: WebSocketConnection, generation: Int) -> OutboxWebSocketWriter<EngineIOFrame>? {
        guard let loopWriter = connection.loopWriter else { return nil }
        let revision3 = revision == 3
        let writer = OutboxWebSocketWriter(
            outbox: outbox, writer: loopWriter, generation: generation,
            encode: { revision3 ? $0.appendRevision3WebSocketMessages(to: &$1) : $0.appendWebSocketMessages(to: &$1) },
            written: { [weak self] written, unwritten, failure in
                self?.settleLoopBatch(written, unwritten, failure, connection: connection, loopWriter: loopWriter)
            })
        writer.start()
        return writer
    }

    /// A compressed connection: its frames go through swift-websocket's writer, in a task.
    @inline(never)
    private func readAndWriteCompressed(
        _ connection: WebSocketConnection, inbound: inout WebSocketMessages.AsyncIterator, generation: Int
    ) async throws -> EngineIOSessionEnd? {
        try await withThrowingTaskGroup(of: ChildEnd.self) { group in
            group.addTask { try await self.webSocketWriter(connection, generation: generation) }
            defer { group.cancelAll() }
            return try await readWebSocket(connection, inbound: &inbound)
        }
    }

    /// A batch the event loop wrote: what went out is kept in the resend window, what did not goes
    /// back first in line. After our close packet the connection closes with the closing handshake;
    /// after a failed write it is closed, and the reader ends with it.
    private func settleLoopBatch(
        _ written: ArraySlice<EngineIOFrame>, _ unwritten: ArraySlice<EngineIOFrame>, _ failure: (any Error)?,
        connection: WebSocketConnection, loopWriter: WebSocketLoopWriter
    ) {
        outbox.wroteUnconfirmed(written)
        if failure != nil { outbox.requeueFront(Array(unwritten)) }
        outbox.finishedWrite()
        countSent(Array(written))
        if written.contains(where: \.isClose) {
            // Unstructured: this runs on the event loop, which must not wait on the closing
            // handshake; it happens once, for a session that is over.
            Task { try? await connection.close(code: 1000, reason: nil) }
        } else if failure != nil {
            loopWriter.closeChannel()
        }
    }

    /// Reads the WebSocket until the session ends.
    @inline(never)
    private func readWebSocket(
        _ connection: WebSocketConnection, inbound: inout WebSocketMessages.AsyncIterator
    ) async throws -> EngineIOSessionEnd? {
        while let messages = try await inbound.nextRead() {
            // Taken once per read: loading the weak reference costs more than a small message's decoding.
            let delegate = try delegate
            // By index: each message is lent to `receive`, not copied out of the batch.
            for index in messages.indices {
                if let end = try receive(messages[index], delegate) {
                    if end == .closedByServer { try? await connection.close(code: 1000, reason: nil) }
                    return end
                }
            }
        }
        return try webSocketEnded()
    }

    /// Handles one WebSocket message: the session's end, if it brings it.
    @inline(never)
    private func receive(_ message: WebSocketInbound, _ delegate: any EngineIODelegate) throws -> EngineIOSessionEnd? {
        let packet: EngineIOPacket
        switch message {
        case .text(let buffer):
            // A message packet (`4` and its payload, both revisions) goes on as the bytes read:
            // neither a packet nor a string is made of it here.
            let delivered = try buffer.withUnsafeReadableBytes { bytes in
                guard bytes.count > 1, bytes[0] == EngineIOPacketType.message.character else { return false }
                try delegate.engineIOReceived(text: UnsafeRawBufferPointer(rebasing: bytes[1...]))
                return true
            }
            if delivered { return nil }
            do {
                packet = try buffer.withUnsafeReadableBytes { bytes throws(SocketIOParseError) in
                    revision == 3 ? try EngineIO3Codec.decode(bytes: bytes) : try EngineIOCodec.decode(bytes: bytes)
                }
            } catch {
                throw RealtimeError(.protocolViolation, "the server sent an invalid Engine.IO packet", underlying: error)
            }
        case .binary(let buffer):
            let data = Data(buffer: buffer, byteTransferStrategy: .noCopy)
            if revision == 3 {
                do { packet = try EngineIO3Codec.decode(binary: data) } catch {
                    throw RealtimeError(.protocolViolation, "the server sent an invalid Engine.IO packet", underlying: error)
                }
            } else {
                packet = EngineIOCodec.decode(binary: data)
            }
        }
        return try handle(packet)
    }

    /// The WebSocket ended without a close packet: closed by the client, or why it failed; nil when
    /// the server ended it, so that the transport reports its close code (a 1008 or 1011 is the
    /// server's word on what happened, not a lost connection).
    @inline(never)
    private func webSocketEnded() throws -> EngineIOSessionEnd? {
        if let failure = state.withLockedValue({ $0.machine.heartbeatFailure }) { throw failure }
        if state.withLockedValue({ $0.machine.closeRequested }) { return .closedByClient }
        return nil
    }

    private func webSocketWriter(_ connection: WebSocketConnection, generation: Int) async throws -> ChildEnd {
        while let frames = await outbox.take(maxBytes: .max, generation: generation) {
            for (index, frame) in frames.enumerated() {
                do {
                    var messages: [RealtimeMessage] = []
                    if revision == 3 { frame.appendRevision3WebSocketMessages(to: &messages) } else { frame.appendWebSocketMessages(to: &messages) }
                    for message in messages { try await connection.send(message) }
                } catch {
                    outbox.wroteUnconfirmed(frames[..<index])
                    outbox.requeueFront(Array(frames[index...]))
                    outbox.finishedWrite()
                    throw error
                }
                if frame.isClose {
                    outbox.wroteUnconfirmed(frames[...index])
                    outbox.finishedWrite()
                    try? await connection.close(code: 1000, reason: nil)
                    return .sessionOver(.closedByClient)
                }
            }
            outbox.wroteUnconfirmed(frames)
            outbox.finishedWrite()
            countSent(frames)
        }
        return .keepGoing
    }

    /// Application frames written (Socket.IO packets, their attachments' bytes included).
    private func countSent(_ frames: [EngineIOFrame]) {
        guard let metrics else { return }
        var messages = 0
        var bytes = 0
        for frame in frames where frame.isApplicationData {
            messages += 1
            bytes += frame.pollingSize
        }
        metrics.sent(messages: messages, bytes: bytes)
    }

    // MARK: Packets and heartbeat

    /// Handles one inbound packet; returns how the session ends if this packet ends it.
    private func handle(_ packet: EngineIOPacket) throws -> EngineIOSessionEnd? {
        switch packet.type {
        case .ping:
            pinged()
            outbox.push(EngineIOFrame(packets: [EngineIOPacket(.pong, packet.payload)], requeueNamespace: nil))
            try delegate.engineIOPinged()
        case .message:
            try delegate.engineIOReceived(packet.payload)
        case .close:
            return .closedByServer
        case .pong where revision == 3:
            // Engine.IO 3: the answer to our ping is what shows the server alive.
            pinged()
            try delegate.engineIOPinged()
        case .noop, .pong, .upgrade:
            break
        case .open:
            throw RealtimeError(.protocolViolation, "the server sent a second Engine.IO open packet")
        }
        return nil
    }

    /// The open packet arrived: the session is open on `transport` and its heartbeat is watched.
    private func opened(_ handshake: EngineIOHandshake, on transport: EngineIOOptions.Transport) {
        let now = runtime.timers.now
        state.withLockedValue { state in
            let deadline = state.machine.opened(handshake, on: transport, now: now, clientPings: revision == 3)
            armHeartbeat(at: deadline, &state)
            if revision == 3 { armPing(after: handshake.pingInterval, &state) }
        }
    }

    /// Engine.IO 3: our next ping, `interval` from now (scheduled under the session's lock, so the
    /// end of the session cancels this very timer).
    private func armPing(after interval: Duration, _ state: inout State) {
        if let previous = state.pingTimer { runtime.timers.cancel(previous) }
        state.pingTimer = runtime.timers.schedule(after: interval) { [weak self] in self?.pingDue() }
    }

    /// Engine.IO 3: sends a ping (the server answers with a pong, which ``pinged()`` records) and
    /// arms the next one. Queued like any packet: on a WebSocket it is written from the event loop.
    private func pingDue() {
        let interval = state.withLockedValue { state -> Duration? in
            state.pingTimer = nil
            guard state.machine.phase != .closed, let handshake = state.machine.handshake else { return nil }
            armPing(after: handshake.pingInterval, &state)
            return handshake.pingInterval
        }
        guard interval != nil else { return }
        outbox.push(EngineIOFrame(packets: [EngineIOPacket(.ping)], requeueNamespace: nil))
    }

    /// A ping arrived (on the reader's path or on the event loop): it only records the time.
    private func pinged() {
        let now = runtime.timers.now
        state.withLockedValue { $0.machine.pinged(now: now) }
    }

    /// Scheduled under the session's lock, so the end of the session cancels this very timer.
    private func armHeartbeat(at deadline: Duration, _ state: inout State) {
        if let previous = state.heartbeatTimer { runtime.timers.cancel(previous) }
        state.heartbeatTimer = runtime.timers.schedule(at: deadline) { [weak self] in self?.heartbeatDue() }
    }

    /// The heartbeat's deadline came: it moves on to the last ping's limit, or the session fails
    /// with a timeout. The polling group's watcher throws it; a WebSocket is closed, which ends its
    /// reader, and the reader throws it.
    private func heartbeatDue() {
        let now = runtime.timers.now
        let (verdict, webSocket) = state.withLockedValue { state -> (Machine.HeartbeatVerdict, WebSocketConnection?) in
            state.heartbeatTimer = nil
            let verdict = state.machine.heartbeatDue(now: now)
            if case .rearm(let deadline) = verdict { armHeartbeat(at: deadline, &state) }
            return (verdict, state.webSocket)
        }
        guard case .expired(let error) = verdict else { return }
        heartbeatOutcome.complete(.failure(error))
        // The server is presumed gone: no closing handshake to wait for (our close frame, then
        // the TCP connection closed at once, from the timer queue).
        webSocket?.abort()
    }

    /// The session is over: no deadline fires after this (one already firing finishes), and a
    /// waiter still parked is let go.
    private func sessionEnded() {
        let (timers, reader, upgrade) = state.withLockedValue { state in
            let (reader, upgrade) = state.machine.ended()
            defer {
                state.heartbeatTimer = nil
                state.pingTimer = nil
            }
            return ([state.heartbeatTimer, state.pingTimer], reader, upgrade)
        }
        for case let timer? in timers { runtime.timers.cancel(timer) }
        reader?.resume(returning: true)
        upgrade?.resume()
    }

    /// The polling group's member for the heartbeat: throws its timeout; returns once the session
    /// moved to the WebSocket.
    private func pollingHeartbeat() async throws -> ChildEnd {
        try await heartbeatOutcome.cancellableValue()
        return .keepGoing
    }

    static func parseHandshake(_ json: String, revision: Int = 4, assumedMaxPayload: Int = 1_000_000) throws -> EngineIOHandshake {
        do {
            return try EngineIOHandshake(json: try JSONReader.parse(json), revision: revision, assumedMaxPayload: assumedMaxPayload)
        } catch {
            throw RealtimeError(.protocolViolation, "invalid Engine.IO open packet", underlying: error)
        }
    }
}
