import RealtimeCore
@testable import SpreadbotClient
import Testing

/// The transport fallback of one connection attempt (SpreadbotFallback), as values: no socket, no
/// task, no clock. The client around it is tested against servers in SpreadbotStreamTests and
/// SpreadbotDeliveryTests; these pin down every path of the rules themselves.
@Suite struct SpreadbotFallbackTests {
    static let all: [SpreadbotTransport] = [.webSocket, .serverSentEvents, .polling]

    /// A readable form of an action, for comparisons.
    static func text(_ action: SpreadbotFallback.Action) -> String {
        switch action {
        case .open(let transport): "open \(transport.rawValue)"
        case .fallBack(let failed, let error, let next): "fall back from \(failed.rawValue) (\(error.code)) to \(next.rawValue)"
        case .dropped(let error, let delay): "dropped (\(error.code))" + (delay.map { " after at least \($0)" } ?? "")
        case .failed(let error): "failed (\(error.code))"
        }
    }

    @Test func eachTransportThatCannotOpenHandsOverToTheNextThenTheLastErrorFailsTheAttempt() {
        var fallback = SpreadbotFallback(transports: Self.all)
        #expect(Self.text(fallback.start()) == "open webSocket")
        #expect(Self.text(fallback.ended(RealtimeError(.badStatus, "404"))) == "fall back from webSocket (badStatus) to serverSentEvents")
        #expect(fallback.current == .serverSentEvents)
        #expect(Self.text(fallback.ended(RealtimeError(.badContentType, "text/html"))) == "fall back from serverSentEvents (badContentType) to polling")
        #expect(Self.text(fallback.ended(RealtimeError(.connectFailed, "refused"))) == "failed (connectFailed)")
        #expect(fallback.current == nil)
    }

    @Test func anOpenTransportThatEndsDropsTheConnectionWithoutFallingBack() {
        var fallback = SpreadbotFallback(transports: Self.all)
        _ = fallback.start()
        fallback.didOpen()
        #expect(Self.text(fallback.ended(RealtimeError(.connectionClosed, "cut"))) == "dropped (connectionClosed)")
        #expect(fallback.current == nil, "the attempt is over: the reconnect driver decides what comes next")
    }

    @Test func theEventStreamsRetryHintIsTheLeastDelayOnlyForTheEventStream() {
        var sse = SpreadbotFallback(transports: [.serverSentEvents, .polling])
        _ = sse.start()
        sse.didOpen()
        #expect(Self.text(sse.ended(nil, retryHint: .seconds(3))) == "dropped (connectionClosed) after at least 3.0 seconds")
        var ws = SpreadbotFallback(transports: [.webSocket])
        _ = ws.start()
        ws.didOpen()
        #expect(Self.text(ws.ended(nil, retryHint: .seconds(3))) == "dropped (connectionClosed)")
    }

    @Test func aServerThatEndsTheStreamCleanlyIsADropEvenBeforeItOpened() {
        var fallback = SpreadbotFallback(transports: Self.all)
        _ = fallback.start()
        #expect(Self.text(fallback.ended(nil)) == "dropped (connectionClosed)")
    }

    @Test func refusedAuthenticationIsNeverRetriedWithAnotherTransport() {
        var fallback = SpreadbotFallback(transports: Self.all)
        _ = fallback.start()
        #expect(Self.text(fallback.ended(RealtimeError(.authenticationFailed, "401 again"))) == "failed (authenticationFailed)")
    }

    @Test func noTransportConfiguredFailsAtOnce() {
        var fallback = SpreadbotFallback(transports: [])
        #expect(Self.text(fallback.start()) == "failed (connectFailed)")
    }
}
