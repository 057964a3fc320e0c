// A service that takes any EventSourceProtocol, so that its tests can give it a double; the app
// gives it the real EventSource. The double calls its callbacks directly, as such doubles do.
import Foundation
import IKEventSource

final class NotificationsService {
    private let source: EventSourceProtocol
    private(set) var unread: [String] = []
    var onChange: (([String]) -> Void)?

    init(source: EventSourceProtocol) {
        self.source = source
        source.addEventListener("notification") { [weak self] _, _, data in
            guard let self = self, let data = data else { return }
            self.unread.append(data)
            self.onChange?(self.unread)
        }
        source.onComplete { [weak self] _, _, _ in
            guard let self = self else { return }
            self.source.connect(lastEventId: self.source.lastEventId)
        }
    }

    static func live(token: String) -> NotificationsService {
        NotificationsService(source: EventSource(url: URL(string: "https://api.example.com/notifications")!, headers: ["Authorization": "Bearer \(token)"]))
    }

    func start() { source.connect(lastEventId: nil) }
    func stop() { source.disconnect() }
}

final class FakeEventSource: EventSourceProtocol {
    var headers: [String: String] = [:]
    var retryTime = 3000
    var url = URL(string: "https://test.invalid")!
    var lastEventId: String?
    var readyState: EventSourceState = .closed
    private var listeners: [String: (String?, String?, String?) -> Void] = [:]
    private var completion: ((Int?, Bool?, NSError?) -> Void)?
    private(set) var connects: [String?] = []

    func connect(lastEventId: String?) { connects.append(lastEventId); readyState = .open }
    func disconnect() { readyState = .closed }
    func events() -> [String] { Array(listeners.keys) }
    func onOpen(_ onOpenCallback: @escaping (() -> Void)) {}
    func onComplete(_ onComplete: @escaping ((Int?, Bool?, NSError?) -> Void)) { completion = onComplete }
    func onMessage(_ onMessageCallback: @escaping ((_ id: String?, _ event: String?, _ data: String?) -> Void)) {}
    func addEventListener(_ event: String, handler: @escaping ((_ id: String?, _ event: String?, _ data: String?) -> Void)) {
        listeners[event] = handler
    }
    func removeEventListener(_ event: String) { listeners[event] = nil }

    func send(_ event: String, id: String?, data: String) {
        lastEventId = id
        listeners[event]?(id, event, data)
    }

    func end() { completion?(200, false, nil) }
}
