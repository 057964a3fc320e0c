import Foundation
internal import RealtimeCore
import Logging
internal import SignalRHub

// SwiftSignalRClient's callback calls: each returns at once and reports on `callbackQueue`.
extension HubConnection {
    /// Registers the handler of the client method `method`, which reads its arguments through an
    /// ``ArgumentExtractor``; registering again replaces it. Runs on the callback queue; an error
    /// it throws is logged.
    public func on(method: String, callback: @escaping (_ argumentExtractor: ArgumentExtractor) throws -> Void) {
        let queue = callbackQueue
        let logger = self.logger
        register(method, returnsResult: false) { arguments in
            deliver(on: queue) {
                do {
                    try callback(ArgumentExtractor(arguments: arguments))
                } catch {
                    logger.error("a client method handler threw", metadata: ["realtime.method": "\(method)", "realtime.error": "\(error)"])
                }
            }
            return nil
        }
    }

    /// Makes `run` the handler of the client method named exactly `method` (both originals match
    /// names case-sensitively and keep one handler per name).
    func register(_ method: String, returnsResult: Bool, run: @escaping ([JSONValue]) async throws -> JSONValue?) {
        if handlers.set(method, HandlerTable.Entry(run: run, returnsResult: returnsResult)) {
            logger.warning("a client method's handler was registered again and replaced", metadata: ["realtime.method": "\(method)"])
        }
        let handlers = self.handlers
        let logger = self.logger
        base.off(method)
        base.on(method, returnsResult: returnsResult) { target, arguments in
            guard let entry = handlers.entry(target) else {
                logger.error("no handler registered for the client method", metadata: ["realtime.method": "\(target)"])
                throw SignalRError.invalidOperation(message: "No handler registered for method '\(target)'.")
            }
            return try await entry.value.run(arguments)
        }
    }

    /// Registers a handler with typed parameters (any count): the invocation's arguments are
    /// decoded in order (extra ones ignored; missing or mistyped ones are logged and the handler
    /// is not called). Runs on the callback queue.
    public func on<each T: Decodable>(method: String, callback: @escaping (repeat each T) -> Void) {
        on(method: method, callback: { (extractor: ArgumentExtractor) in
            let values = try (repeat extractor.getArgument(type: (each T).self))
            callback(repeat each values)
        })
    }

    /// Calls the hub method `method` and reports its completion (the hub's error as
    /// ``SignalRError/hubInvocationError(message:)``).
    public func invoke(method: String, arguments: [any Encodable], invocationDidComplete: @escaping (_ error: (any Error)?) -> Void) {
        invoke(method: method, arguments: arguments, clientStreams: [], invocationDidComplete: invocationDidComplete)
    }

    /// Calls the hub method `method` and reports its result as `resultType` (nil, nil for a
    /// completion without a result).
    public func invoke<T: Decodable>(method: String, arguments: [any Encodable], resultType: T.Type, invocationDidComplete: @escaping (_ result: T?, _ error: (any Error)?) -> Void) {
        invoke(method: method, arguments: arguments, clientStreams: [], resultType: resultType, invocationDidComplete: invocationDidComplete)
    }

    /// ``invoke(method:arguments:invocationDidComplete:)`` with client-to-server streams.
    public func invoke(method: String, arguments: [any Encodable], clientStreams: [AsyncStream<any Encodable>], invocationDidComplete: @escaping (_ error: (any Error)?) -> Void) {
        let queue = callbackQueue
        let done = HandOff<(Result<JSONValue?, any Error>) -> Void> { result in
            let error: (any Error)? = if case .failure(let error) = result { Self.moozzykError(error) } else { nil }
            deliver(on: queue) { invocationDidComplete(error) }
        }
        run(method: method, arguments: arguments, clientStreams: clientStreams, done: done)
    }

    /// ``invoke(method:arguments:resultType:invocationDidComplete:)`` with client-to-server streams.
    public func invoke<T: Decodable>(method: String, arguments: [any Encodable], clientStreams: [AsyncStream<any Encodable>], resultType: T.Type, invocationDidComplete: @escaping (_ result: T?, _ error: (any Error)?) -> Void) {
        let queue = callbackQueue
        let done = HandOff<(Result<JSONValue?, any Error>) -> Void> { result in
            let outcome: (T?, (any Error)?)
            switch result {
            case .success(nil), .success(.null?): outcome = (nil, nil)
            case .success(let value?):
                do { outcome = (try HubValueCoding.decode(value, as: T.self), nil) } catch { outcome = (nil, SignalRError.serializationError(underlyingError: error)) }
            case .failure(let error): outcome = (nil, Self.moozzykError(error))
            }
            deliver(on: queue) { invocationDidComplete(outcome.0, outcome.1) }
        }
        run(method: method, arguments: arguments, clientStreams: clientStreams, done: done)
    }

    /// ``invoke(method:arguments:invocationDidComplete:)`` with the arguments listed.
    public func invoke(method: String, _ arguments: any Encodable..., invocationDidComplete: @escaping (_ error: (any Error)?) -> Void) {
        invoke(method: method, arguments: arguments, invocationDidComplete: invocationDidComplete)
    }

    /// ``invoke(method:arguments:resultType:invocationDidComplete:)`` with the arguments listed.
    public func invoke<T: Decodable>(method: String, _ arguments: any Encodable..., resultType: T.Type, invocationDidComplete: @escaping (_ result: T?, _ error: (any Error)?) -> Void) {
        invoke(method: method, arguments: arguments, resultType: resultType, invocationDidComplete: invocationDidComplete)
    }

    /// ``invoke(method:arguments:invocationDidComplete:)`` with the arguments listed and one
    /// client-to-server stream.
    public func invoke(method: String, _ arguments: any Encodable..., clientStream: AsyncStream<any Encodable>, invocationDidComplete: @escaping (_ error: (any Error)?) -> Void) {
        invoke(method: method, arguments: arguments, clientStreams: [clientStream], invocationDidComplete: invocationDidComplete)
    }

    /// ``invoke(method:arguments:resultType:invocationDidComplete:)`` with the arguments listed
    /// and one client-to-server stream.
    public func invoke<T: Decodable>(method: String, _ arguments: any Encodable..., clientStream: AsyncStream<any Encodable>, resultType: T.Type, invocationDidComplete: @escaping (_ result: T?, _ error: (any Error)?) -> Void) {
        invoke(method: method, arguments: arguments, clientStreams: [clientStream], resultType: resultType, invocationDidComplete: invocationDidComplete)
    }

    /// Sends to the hub method `method` without waiting for it; the completion (optional) says
    /// whether the message was written.
    public func send(method: String, arguments: [any Encodable], sendDidComplete: @escaping (_ error: (any Error)?) -> Void = { _ in }) {
        let values = HandOff(arguments)
        let queue = callbackQueue
        let done = HandOff(sendDidComplete)
        let gate = self.gate
        gate.begin()
        background { [base] in
            var failure: (any Error)?
            do {
                try await base.send(method: method, argumentList: values.value)
            } catch {
                failure = Self.moozzykError(error)
            }
            let outcome = HandOff(failure)
            deliver(on: queue) { done.value(outcome.value) }
            gate.end(on: queue)
        }
    }

    /// ``send(method:arguments:sendDidComplete:)`` with the arguments listed.
    public func send(method: String, _ arguments: any Encodable..., sendDidComplete: @escaping (_ error: (any Error)?) -> Void = { _ in }) {
        send(method: method, arguments: arguments, sendDidComplete: sendDidComplete)
    }

    /// Starts the server-to-client stream `method`: each item as `T`, then the completion (nil
    /// also after a cancel).
    public func stream<T: Decodable>(method: String, arguments: [any Encodable], streamItemReceived: @escaping (_ item: T) -> Void, invocationDidComplete: @escaping (_ error: (any Error)?) -> Void) -> StreamHandle {
        let handle = StreamHandle()
        let queue = callbackQueue
        let logger = self.logger
        let item = HandOff<(JSONValue) throws -> Void> { value in
            let decoded = try HubValueCoding.decode(value, as: T.self)
            deliver(on: queue) { streamItemReceived(decoded) }
        }
        let done = HandOff<((any Error)?) -> Void> { error in
            let reported = error.map(Self.moozzykError)
            deliver(on: queue) { invocationDidComplete(reported) }
        }
        let values = HandOff(arguments)
        let gate = self.gate
        gate.begin()
        background { [base] in
            var failure: (any Error)?
            do {
                let encoded = try values.value.map { try HubValueCoding.encode($0) }
                let raw = try await base.streamRaw(method: method, arguments: encoded)
                let cancelled = handle.state.withLock { state -> Bool in
                    state.raw = raw
                    return state.cancelled
                }
                if cancelled { await raw.cancel() }
                for try await value in raw {
                    do {
                        try item.value(value)
                    } catch {
                        logger.error("a stream item did not decode", metadata: ["realtime.method": "\(method)", "realtime.error": "\(error)"])
                        failure = SignalRError.serializationError(underlyingError: error)
                        await raw.cancel()
                        break
                    }
                }
            } catch {
                if (error as? RealtimeError)?.code == .notConnected { handle.state.withLock { $0.valid = false } }
                failure = error
            }
            done.value(failure)
            gate.end(on: queue)
        }
        return handle
    }

    /// ``stream(method:arguments:streamItemReceived:invocationDidComplete:)`` with the arguments
    /// listed.
    public func stream<T: Decodable>(method: String, _ arguments: any Encodable..., streamItemReceived: @escaping (_ item: T) -> Void, invocationDidComplete: @escaping (_ error: (any Error)?) -> Void) -> StreamHandle {
        stream(method: method, arguments: arguments, streamItemReceived: streamItemReceived, invocationDidComplete: invocationDidComplete)
    }

    /// Not carried: a stream with client-to-server streams in the same call.
    @available(*, unavailable, message: "a server-to-client stream cannot also upload client streams here: stream the upload with invoke(method:arguments:clientStreams:...) or send, and the download with stream(method:arguments:...)")
    public func stream<T: Decodable>(method: String, arguments: [any Encodable], clientStreams: [AsyncStream<any Encodable>], streamItemReceived: @escaping (_ item: T) -> Void, invocationDidComplete: @escaping (_ error: (any Error)?) -> Void) -> StreamHandle {
        fatalError("unavailable")
    }

    /// Not carried: a stream with a client-to-server stream in the same call.
    @available(*, unavailable, message: "a server-to-client stream cannot also upload a client stream here: stream the upload with invoke(method:_:clientStream:...) or send, and the download with stream(method:...)")
    public func stream<T: Decodable>(method: String, _ arguments: any Encodable..., clientStream: AsyncStream<any Encodable>, streamItemReceived: @escaping (_ item: T) -> Void, invocationDidComplete: @escaping (_ error: (any Error)?) -> Void) -> StreamHandle {
        fatalError("unavailable")
    }

    /// Asks the server to end the stream `streamHandle` started; `cancelDidFail` only on failure.
    public func cancelStreamInvocation(streamHandle: StreamHandle, cancelDidFail: @escaping (_ error: any Error) -> Void) {
        let queue = callbackQueue
        guard base.currentState == .connected else {
            deliver(on: queue) { cancelDidFail(SignalRError.invalidOperation(message: "Attempting to send data before connection has been started.")) }
            return
        }
        let (raw, valid) = streamHandle.state.withLock { state -> (HubRawStream?, Bool) in
            state.cancelled = true
            return (state.raw, state.valid)
        }
        guard valid else {
            deliver(on: queue) { cancelDidFail(SignalRError.invalidOperation(message: "Invalid stream handle.")) }
            return
        }
        if let raw { background { await raw.cancel() } }
    }

    /// Runs an invocation for the callback API and hands its outcome to `done`.
    private func run(method: String, arguments: [any Encodable], clientStreams: [AsyncStream<any Encodable>], done: HandOff<(Result<JSONValue?, any Error>) -> Void>) {
        var list: [any Encodable] = arguments
        list += clientStreams.map(Self.upload)
        let values = HandOff(list)
        let gate = self.gate
        let queue = callbackQueue
        gate.begin()
        background { [base] in
            do {
                done.value(.success(try await base.invoke(method: method, argumentList: values.value)))
            } catch {
                done.value(.failure(error))
            }
            gate.end(on: queue)
        }
    }

    /// A client stream of the callback API as this package's upload.
    static func upload(_ items: AsyncStream<any Encodable>) -> UploadStream {
        let (values, continuation) = AsyncStream.makeStream(of: JSONValue.self)
        let source = HandOff(items)
        background {
            for await item in source.value {
                if let value = try? HubValueCoding.encode(item) { continuation.yield(value) }
            }
            continuation.finish()
        }
        return UploadStream(values)
    }
}

// The official client's async calls.
extension HubConnection {
    /// Sends to the hub method `method` without waiting for it. An `AsyncStream` argument of
    /// `Encodable` items is streamed to the server.
    public func send(method: String, arguments: Any...) async throws {
        do {
            try await base.send(method: method, argumentList: try arguments.map(Self.streamed))
        } catch {
            throw Self.dotnetError(error)
        }
    }

    /// Calls the hub method `method` and waits for its completion.
    public func invoke(method: String, arguments: Any...) async throws {
        do {
            _ = try await base.invoke(method: method, argumentList: try arguments.map(Self.streamed))
        } catch {
            throw Self.dotnetError(error)
        }
    }

    /// Calls the hub method `method` and returns its result.
    public func invoke<TReturn: Decodable>(method: String, arguments: Any...) async throws -> TReturn {
        let value: JSONValue?
        do {
            value = try await base.invoke(method: method, argumentList: try arguments.map(Self.streamed))
        } catch {
            throw Self.dotnetError(error)
        }
        do {
            return try HubValueCoding.decode(value ?? .null, as: TReturn.self)
        } catch {
            throw SignalRError.invalidOperation(message: "Cannot convert the result of the invocation to the specified type.")
        }
    }

    /// Starts the server-to-client stream `method`.
    public func stream<Element: Decodable>(method: String, arguments: Any...) async throws -> any StreamResult<Element> {
        let raw: HubRawStream
        do {
            let values = try arguments.map(Self.streamed)
            raw = try await base.streamRaw(method: method, arguments: values.map { try HubValueCoding.encode($0) })
        } catch {
            throw Self.dotnetError(error)
        }
        let decode = HandOff<(JSONValue) throws -> Element> { try HubValueCoding.decode($0, as: Element.self) }
        return StreamResultBox(raw: raw, decode: decode)
    }

    /// Registers the handler of the client method `methodName`, awaited one invocation at a time in
    /// arrival order; registering again replaces it. The arguments are decoded as the parameters'
    /// types; an invocation with another argument count is logged and skipped.
    public func on<each T: Decodable>(_ methodName: String, handler: @escaping (repeat each T) async -> Void) {
        let logger = self.logger
        register(methodName, returnsResult: false) { arguments in
            do {
                let values = try Self.bind(arguments, as: (repeat (each T).self))
                await handler(repeat each values)
            } catch {
                logger.error("a client method's arguments did not bind", metadata: ["realtime.method": "\(methodName)", "realtime.error": "\(error)"])
            }
            return nil
        }
    }

    /// Registers a client-result handler: its return value answers the server's invocation.
    public func on<each T: Decodable, Result: Encodable>(_ methodName: String, handler: @escaping (repeat each T) async -> Result) {
        register(methodName, returnsResult: true) { arguments in
            let values = try Self.bind(arguments, as: (repeat (each T).self))
            return try HubValueCoding.encode(await handler(repeat each values))
        }
    }

    /// Removes the handler of `method`.
    public func off(method: String) {
        handlers.remove(method)
    }

    /// Decodes `arguments` as the types `types`, exactly as many.
    static func bind<each T: Decodable>(_ arguments: [JSONValue], as types: (repeat (each T).Type)) throws -> (repeat each T) {
        var count = 0
        for _ in repeat (each T).self { count += 1 }
        guard count == arguments.count else {
            throw SignalRError.invalidData("the handler takes \(count) arguments; the invocation has \(arguments.count)")
        }
        var index = 0
        func next<U: Decodable>(_ type: U.Type) throws -> U {
            defer { index += 1 }
            do {
                return try HubValueCoding.decode(arguments[index], as: U.self)
            } catch {
                throw SignalRError.invalidData("argument \(index): \(error)")
            }
        }
        return try (repeat next((each T).self))
    }

    /// An `AsyncSequence` argument of `Encodable` items as an upload; an `Encodable` one as it is.
    static func streamed(_ argument: Any) throws -> any Encodable {
        if let items = argument as? any AsyncSequence, let upload = uploadAny(items) { return upload }
        guard let value = argument as? any Encodable else {
            throw SignalRError.invalidData("an argument of type \(type(of: argument)) is not Encodable")
        }
        return value
    }

    private static func uploadAny(_ items: any AsyncSequence) -> UploadStream? {
        func open<S: AsyncSequence>(_ sequence: S) -> UploadStream? {
            guard S.Element.self is any Encodable.Type else { return nil }
            let (values, continuation) = AsyncStream.makeStream(of: JSONValue.self)
            let pump = HandOff<() async -> Void> {
                do {
                    for try await item in sequence {
                        if let item = item as? any Encodable, let value = try? HubValueCoding.encode(item) { continuation.yield(value) }
                    }
                } catch {}
                continuation.finish()
            }
            background { await pump.value() }
            return UploadStream(values)
        }
        return open(items)
    }
}
